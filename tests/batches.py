"""The shapes of a task's real first batch (tests of `Task.batch_spec`)."""

import jax


def first_batch_spec(task) -> dict[str, jax.ShapeDtypeStruct]:
  """Shapes and dtypes of one global train batch as the task's data gives it: this
  process's first batch, scaled to the global batch."""
  batch = next(iter(task.train_batches(0)))
  scale = task.config.batch_size // task.env.local_batch_size
  return {k: jax.ShapeDtypeStruct((v.shape[0] * scale, *v.shape[1:]), v.dtype)
          for k, v in batch.items()}
