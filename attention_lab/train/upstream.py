"""Runs that need another run's result first: the digits classifier behind the GAN's
digits-FID (`eval.classifier_config`), the classification backbone a segmentation or
detection run starts from (`init_from` = a config file).

`trained(config, workdir)` restores the upstream run from `workdir`, training it there to
its last step first when it is not finished (a killed or preempted upstream run resumes
on the next call, like any run).
"""

import os

from absl import logging

from attention_lab import cli
from attention_lab.train import signals

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def is_config_file(spec: str) -> bool:
  """True for `path/to/config.py[:preset]`."""
  return spec.partition(":")[0].endswith(".py")


def load_config_file(spec: str, field: str = "config"):
  """`path/to/config.py[:preset]` named by the config field `field` (`cli.load_config`); a
  relative path is tried from the working directory, then from the repository root."""
  return cli.load_config(spec, field, root=REPO)


def trained(config, workdir: str):
  """The Trainer of `config` in `workdir`, trained to its last step first if needed. On
  SIGTERM during that training the upstream run saves, and the request stays raised so the
  calling run stops before its first step too."""
  from attention_lab.train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  trainer = trainer_lib.Trainer(config, workdir)
  if int(trainer.state["step"]) < trainer.total_steps:
    trainer.say(f"Training the upstream run in {workdir} first")
    summary = trainer.run()
    if trainer.preempted:
      signals.PREEMPTION.requested = True
    else:
      logging.info("Upstream run %s: %s", workdir, summary)
  return trainer


def weights_path(init_from: str, workdir: str) -> str:
  """`init_from` as a path to load weights from: a classification config file
  (`path.py[:preset]`) is trained first into <workdir>/pretrained, which is returned;
  anything else (a .pth file, a checkpoint) is returned as it is."""
  if not is_config_file(init_from):
    return init_from
  config = load_config_file(init_from, "init_from")
  if config.get("task", "classification") != "classification":
    raise ValueError(f"init_from {init_from!r} must be a classification config, got task "
                     f"{config.task!r}")
  path = os.path.join(workdir, "pretrained")
  trained(config, path)
  return path


def digits_classifier(ev, workdir: str):
  """The digits classifier behind the GAN's digits features, in evaluation mode, and its
  config: `ev.classifier_config` restored from `ev.classifier_workdir` ("" =
  <workdir>/digits_classifier), trained there first when its run is not finished."""
  config = load_config_file(ev.classifier_config, "eval.classifier_config")
  if config.get("task", "classification") != "classification" or config.dataset.name != "digits":
    raise ValueError(f"eval.classifier_config must be a digits classification config, got "
                     f"{ev.classifier_config!r}")
  cls_workdir = ev.classifier_workdir or os.path.join(workdir, "digits_classifier")
  trainer = trained(config, cls_workdir)
  return trainer.task.model(trainer.state), config
