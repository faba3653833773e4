import jax.numpy as jnp
import ml_collections
import pytest

from attention_lab.train import tasks
from attention_lab.train.tasks import base


def test_every_task_module_defines_a_task_class():
  assert "classification" in tasks.names()
  for name in tasks.names():
    module = __import__(f"attention_lab.train.tasks.{name}", fromlist=["TASK"])
    assert issubclass(module.TASK, base.Task), name


def test_a_task_must_implement_the_contract():
  class Incomplete(base.Task):
    def init_state(self):
      return {}

  with pytest.raises(TypeError, match="abstract"):
    Incomplete(None, None)


class _Scheduled(base.Task):
  """The shared pieces only: no data, no model (the contract's methods are unused)."""

  init_state = train_step = train_batches = evaluate = batch_spec = lambda *args: None

  def __init__(self, config):  # pylint: disable=super-init-not-called
    self.config = config


def test_set_schedule_derives_total_steps_and_learning_rates_follow_it():
  config = ml_collections.ConfigDict(dict(
      batch_size=8, num_epochs=2, num_train_steps=0,
      optimizer=dict(name="adamw", learning_rate=1e-3, weight_decay=0.0, grad_clip_norm=0.0,
                     schedule="cosine", warmup_epochs=0.5)))
  task = _Scheduled(config)
  assert task.learning_rates(1) == {}
  schedule = task.set_schedule(100)
  assert (task.steps_per_epoch, task.total_steps) == (12, 24)  # ⌊100 / 8⌋ per epoch, 2 epochs
  for step in (1, 6, 24):  # the rate of the step just taken: schedule(step − 1)
    assert task.learning_rates(step) == {"learning_rate": float(schedule(step - 1))}
  assert task.learning_rates(7)["learning_rate"] == pytest.approx(1e-3)  # warm-up ends at 6
  config.num_train_steps = 5
  task.set_schedule(100)
  assert task.total_steps == 5


def test_model_dtype_by_name():
  assert base.model_dtype("bfloat16") == jnp.bfloat16
  assert base.model_dtype("float32") == jnp.float32
  with pytest.raises(ValueError, match="model.dtype must be one of"):
    base.model_dtype("float16")
