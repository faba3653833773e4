"""THE train loop, for every task: mesh, state placement, data feeding, jit,
checkpoints, SIGTERM, progress and metric writing. It knows no model and no loss:
`config.task` names a module of attention_lab/train/tasks/ that owns those (see
tasks/base.py for the contract).

The state is a pytree of arrays placed with NamedSharding over a
`jax.sharding.Mesh` with one "data" axis (replicated, or parameters split along
their largest divisible axis with `mesh.param_sharding="fsdp"`); it is created
by a jitted init with `out_shardings`, or restored by orbax straight into those
shardings, so every process holds only its own shards. Batches are global
arrays split over "data", assembled per process with
`jax.make_array_from_process_local_data`. XLA inserts the cross-device
reductions (gradients, BatchNorm statistics over the global batch), so the loss
does not depend on the device count.
"""

import os
import signal
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from clu import metric_writers, periodic_actions
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from attention_lab.train import tasks


def make_mesh(config) -> jax.sharding.Mesh:
  """A 1-D ("data",) mesh over `config.mesh.num_devices` devices (-1: all)."""
  n = config.mesh.num_devices
  devices = jax.devices() if n == -1 else jax.devices()[:n]
  return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)


def state_shardings(state, mesh, rule: str):
  """Replicated state, or "fsdp": each array split over "data" along its largest divisible axis."""
  if rule not in ("replicated", "fsdp"):
    raise ValueError(f"mesh.param_sharding must be 'replicated' or 'fsdp', got {rule!r}")
  size = mesh.shape["data"]

  def spec(x):
    if rule == "fsdp" and getattr(x, "ndim", 0) >= 1:
      axes = [a for a in np.argsort(x.shape)[::-1] if x.shape[a] % size == 0]
      if axes:
        return NamedSharding(mesh, P(*[("data" if a == axes[0] else None) for a in range(x.ndim)]))
    return NamedSharding(mesh, P())

  return jax.tree.map(spec, state)


def _check_workdir(workdir: str) -> None:
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise ValueError(f"workdir {workdir!r} cannot be written: {e}") from None


def _is_key(x):
  """A typed PRNG key array, or its abstract ShapeDtypeStruct."""
  return jnp.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key)


def _storable(state):
  """Typed PRNG keys become raw uint32 key data for orbax."""
  return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, state)


def _unstorable(restored, like):
  """Undoes `_storable`, given the (abstract) state it came from."""
  return jax.tree.map(
      lambda r, x: jax.random.wrap_key_data(r, impl=x.dtype._impl) if _is_key(x) else r,  # pylint: disable=protected-access
      restored, like)


class Trainer:
  """Builds the task, mesh, state and checkpoints from a config; `run()` trains."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str):
    self.config, self.workdir = config, workdir
    _check_workdir(workdir)
    self.mesh = make_mesh(config)
    num_devices = self.mesh.size
    if config.batch_size % num_devices:
      raise ValueError(
          f"batch_size (global, {config.batch_size}) must be divisible by the number of "
          f"devices in the mesh ({num_devices})")
    if config.batch_size % jax.process_count():
      raise ValueError(f"batch_size ({config.batch_size}) must be divisible by the process "
                       f"count ({jax.process_count()})")
    self.local_batch = config.batch_size // jax.process_count()
    self.env = tasks.Environment(self.mesh, workdir, self.local_batch)
    self.task = tasks.create(config, self.env)
    self.total_steps = self.task.total_steps

    abstract = jax.eval_shape(self.task.init_state)
    self.shardings = state_shardings(abstract, self.mesh, config.mesh.param_sharding)
    self.train_step = jax.jit(self.task.train_step, donate_argnums=0,
                              out_shardings=(self.shardings, None))
    self.checkpoints = ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=config.keep_checkpoints,
            save_interval_steps=config.checkpoint_every_steps))
    latest = self.checkpoints.latest_step()
    if latest is None:
      self.state = self.task.from_pretrained(
          jax.jit(self.task.init_state, out_shardings=self.shardings)())
    else:
      target = jax.tree.map(self._restore_target, abstract, self.shardings)
      restored = self.checkpoints.restore(latest, args=ocp.args.StandardRestore(target))
      self.state = _unstorable(restored, abstract)
      logging.info("Resumed from %s at step %d", self.checkpoints.directory, latest)
    logging.info("%s parameters", f"{count_parameters(self.state):,}")

  def _restore_target(self, like, sharding):
    if _is_key(like):  # stored as raw uint32 key data, replicated
      data = jax.eval_shape(jax.random.key_data, like)
      return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=NamedSharding(self.mesh, P()))
    return jax.ShapeDtypeStruct(like.shape, like.dtype, sharding=sharding)

  def global_batch(self, batch):
    """This process's numpy batch → global arrays sharded over the mesh's "data" axis."""
    return self.env.global_batch(batch)

  def evaluate(self) -> dict[str, float]:
    return self.task.evaluate(self.state)

  def save(self, *, force: bool = False) -> None:
    step = int(self.state["step"])
    self.checkpoints.save(step, args=ocp.args.StandardSave(_storable(self.state)), force=force)

  def run(self, until_step: int | None = None) -> dict[str, float]:
    """Trains from the workdir's last checkpoint to `total_steps`, or only to `until_step`
    (a session budget: the schedule still spans `total_steps`); saves and returns the last
    metrics."""
    config = self.config
    start = int(self.state["step"])
    last = self.total_steps if until_step is None else min(until_step, self.total_steps)
    if start >= last:  # already trained (e.g. a re-run of a finished workdir): just evaluate
      return self.evaluate()
    writer = metric_writers.create_default_writer(
        self.workdir, just_logging=jax.process_index() > 0)
    report = periodic_actions.ReportProgress(
        num_train_steps=self.total_steps, writer=writer, every_steps=config.log_every_steps,
        every_secs=None)
    stop = {"requested": False}
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))
    data = self.task.train_batches(start)
    train_metrics, summary = None, {}
    try:
      for step in range(start + 1, last + 1):
        self.state, values = self.train_step(self.state, self.global_batch(next(data)))
        train_metrics = values if train_metrics is None else train_metrics.merge(values)
        report(step)
        if step % config.log_every_steps == 0 or step == self.total_steps:
          summary = {f"train_{k}": float(v) for k, v in train_metrics.compute().items()}
          summary.update(self.task.learning_rates(step))
          writer.write_scalars(step, summary)
          train_metrics = None
        if step % config.eval_every_steps == 0 or step == self.total_steps:
          evaluation = self.evaluate()
          writer.write_scalars(step, evaluation)
          self._write_images(writer, step)
          summary.update(evaluation)
        if stop["requested"]:
          logging.warning("SIGTERM: saving step %d and exiting", step)
        self.save(force=step == last or stop["requested"])
        if stop["requested"]:
          break
    finally:
      self.checkpoints.wait_until_finished()
      signal.signal(signal.SIGTERM, previous)
      writer.flush()
    return summary

  def _write_images(self, writer, step: int) -> None:
    """The task's pictures: to TensorBoard and as PNG files under workdir/images/."""
    images = self.task.image_summaries(self.state)
    if not images or jax.process_index() > 0:
      return
    writer.write_images(step, images)
    from PIL import Image  # pylint: disable=g-import-not-at-top
    folder = os.path.join(self.workdir, "images")
    os.makedirs(folder, exist_ok=True)
    for name, batch in images.items():
      tiles = np.concatenate(list(np.asarray(batch)), axis=1)  # side by side
      Image.fromarray(tiles.squeeze(-1) if tiles.shape[-1] == 1 else tiles).save(
          os.path.join(folder, f"{name.replace('/', '_')}_{step:07d}.png"))


def count_parameters(state) -> int:
  """Parameters in a state: every array under a "params" key, at any depth."""
  total = 0
  for path, leaf in jax.tree_util.tree_leaves_with_path(state):
    if any(getattr(k, "key", None) == "params" for k in path):
      total += int(np.prod(np.shape(leaf)))
  return total
