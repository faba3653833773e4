"""The runs a run depends on, resolved by the entry point before its task exists: the
digits classifier behind the GAN's digits features (`eval.classifier_config`), the
classification backbone a segmentation or detection run starts from (`init_from` = a
config file). Each is trained in its own workdir first when it is not finished (a killed
or preempted upstream run resumes on the next call, like any run); the task receives the
results through `Environment.dependencies` and never trains another run.
"""

from etils import epath

from attention_lab import cli
from attention_lab.train import console, trainer as trainer_lib

REPO = epath.Path(__file__).parents[2]


def is_config_file(spec: str) -> bool:
  """True for `path/to/config.py[:preset]`."""
  return spec.partition(":")[0].endswith(".py")


def load_config_file(spec: str, field: str = "config"):
  """`path/to/config.py[:preset]` named by the config field `field` (`cli.load_config`); a
  relative path is tried from the working directory, then from the repository root."""
  return cli.load_config(spec, field, root=str(REPO))


def trained(config, workdir: str) -> "trainer_lib.Trainer | None":
  """The Trainer of `config` in `workdir`, trained to its last step first if needed; None
  when a SIGTERM stopped that training (the stop stays decided, train/signals.py, so the
  calling run stops before its first step too)."""
  trainer = trainer_lib.Trainer(config, workdir)
  if int(trainer.state["step"]) < trainer.total_steps:
    console.print_line(f"Training the upstream run in {workdir} first")
    trainer.run()
    if trainer.preempted:
      return None
  return trainer


def _classification(spec: str, field: str):
  config = load_config_file(spec, field)
  if config.task != "classification":
    raise ValueError(f"{field} {spec!r} must be a classification config, got task "
                     f"{config.task!r}")
  return config


def resolve(config, workdir: str) -> dict:
  """{"init_from": the weights path (a config file's run trained into
  <workdir>/pretrained), "classifier": (the digits classifier in evaluation mode, its
  config)} for what `config` needs; {} for a run that needs nothing. A SIGTERM during an
  upstream run leaves the stop decided and returns what was resolved. A synthetic speed
  run needs neither weights nor an evaluation: {}."""
  out = {}
  if config.dataset.synthetic:
    return out
  init_from = config.init_from
  if init_from and is_config_file(init_from):
    path = str(epath.Path(workdir) / "pretrained")
    if trained(_classification(init_from, "init_from"), path) is None:
      return out
    out["init_from"] = path
  if config.task == "gan" and config.eval.features == "digits":
    ev = config.eval
    classifier = _classification(ev.classifier_config, "eval.classifier_config")
    if classifier.dataset.name != "digits":
      raise ValueError(f"eval.classifier_config must be a digits classification config, got "
                       f"{ev.classifier_config!r}")
    run = trained(classifier, ev.classifier_workdir
                  or str(epath.Path(workdir) / "digits_classifier"))
    if run is not None:
      out["classifier"] = (run.task.model(run.state), classifier)
  return out
