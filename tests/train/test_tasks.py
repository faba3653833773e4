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
