"""Predictions as files a benchmark server or an external tool takes, written by the task
(`Task.export`; the formats in evaluation/submission.py) to a local path or a URI.

  python -m attention_lab.predict --config=CONFIG --workdir=W --split=SPLIT --out=DIR

restores the newest checkpoint in W (read only) and writes, by `config.task`:

- segmentation: one PNG per image at the image's original size, predicted as the
  evaluation predicts (`config.eval`: scales, flip, sliding windows; the
  probabilities of an image shrunk to fit `dataset.eval_size` are resized back
  bilinearly before the argmax). Image ids are the dataset's `image_id` (file
  names), or the 5-digit example index where it has none (digit scenes).
  * `voc_segmentation`: DIR/results/VOC2012/Segmentation/comp6_test_cls/<id>.png,
    palette PNGs with the VOC colour map, values 0-20 (the evaluation server's
    layout; tar DIR/results and upload). comp6 ("trained on any data"), not comp5
    ("VOC2012 data only"): the papers' models start from ImageNet backbones and
    train on SBD's train_aug. The server's set is `--split=test`: the builder's
    images without masks (data/builders/voc_segmentation.py), there when
    VOC2012test.tar was unpacked in the manual_dir before it was prepared.
  * `ade20k_challenge`: DIR/<id>.png, greyscale (mode L) class ids 1-150, as the
    Scene Parsing challenge and mmseg's `format_results` write them (0 is "other"
    and never predicted). Greyscale rather than palette: the challenge's Python
    evaluation reads PNGs with scipy's imread, which turns a palette into colours.
  * `pascal_context`: DIR/<id>.png, palette PNGs (VOC colour map) with values 1-59
    for the 59 classes and 0 for none (the convention of the Detail-API / mmseg
    label maps the builder reads, so `read_indices` on a prediction gives the
    ground truth's encoding).
  * `cityscapes/semantic_segmentation`: DIR/<id>.png, greyscale labelIds (the
    19 trainIds mapped back), as the Cityscapes server takes them.
  * anything else (digit scenes): DIR/<id>.png, palette PNGs with the class index.
- detection: DIR/detections_<set>_attention_lab_results.json, COCO's results format
  ([{"image_id", "category_id", "bbox": [x, y, w, h] in original image pixels,
  "score"}]); <set> is test-dev2017 for coco/2017's `test` split, val2017 for
  `validation`, else the split name (file-safe). Category ids are COCO's (1-90 with gaps) for
  coco/2017, label + 1 otherwise (as evaluation/coco.py); image ids COCO's
  `image/id`, else the example index.
- gan: `--num_samples` images (default `eval.num_samples`) from the EMA generator
  through the task's own sampler (the evaluation's fixed key, class-balanced
  labels): DIR/<class:04d>/<n:06d>.png per class for a conditional model, else
  DIR/<n:06d>.png; folders an external FID tool (pytorch-fid, clean-fid) reads.
- restoration: DIR/<name>.tif, float32 restored image (Y, X) or volume (Z, Y, X)
  (a trailing channel axis kept when there are several), predicted whole tile by
  tile as the evaluation does.

`--split` defaults to the config's eval split. A workdir without a checkpoint, a
segmentation split the prepared dataset lacks, or a bad flag, is one line on stderr
and exit status 2.
"""

import os
import sys

if __name__ == "__main__" and not any(a.startswith(("--verbosity", "-v")) for a in sys.argv[1:]):
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # TF 2.21 logs its oneDNN notice at any TF_CPP_MIN_LOG_LEVEL

# pylint: disable=g-import-not-at-top,wrong-import-position
import jax
from absl import app, flags, logging
from ml_collections import config_flags

from attention_lab import cli

_CONFIG = cli.define_once(config_flags.DEFINE_config_file, "config", None, "Experiment config file.")
_WORKDIR = cli.define_once(flags.DEFINE_string, "workdir", None, "The trained run's workdir (its checkpoints/).")
_SPLIT = flags.DEFINE_string("split", "", "Dataset split to predict (default: the eval split).")
_OUT = cli.define_once(flags.DEFINE_string, "out", None, "Folder the prediction files are written to.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 0, "GAN: images to write (0: eval.num_samples).")
_DEBUG = cli.define_once(flags.DEFINE_bool, "debug", False, "Show tracebacks instead of one-line errors.")

TASKS = ("segmentation", "detection", "gan", "restoration")


# ------------------------------------------------------------------ the trained state
def restore(config, workdir: str):
  """(task, state, step): the config's task (any task) and the newest checkpoint in
  `workdir` (a path or URI), in the loop's shardings. cli.ConfigError when the workdir
  holds no checkpoint or it does not restore into this config's state."""
  from attention_lab.train import checkpointing, state as state_lib, tasks
  mesh = state_lib.make_mesh(config)
  env = tasks.Environment(mesh, workdir, config.batch_size // jax.process_count())
  task = tasks.create(config, env)
  checkpoints = checkpointing.Checkpoints(workdir, read_only=True)
  step = checkpoints.latest_step()
  if step is None:
    raise cli.ConfigError(
        f"--workdir = {workdir!r}: no checkpoint in {checkpoints.directory}; train first "
        f"(python -m attention_lab.main --config=... --workdir={workdir})")
  try:
    state, _ = state_lib.StateLayout(task, mesh, config.mesh.param_sharding).restore(
        checkpoints, step)
  except Exception as e:  # pylint: disable=broad-except
    raise cli.ConfigError(
        f"checkpoint step {step} in {checkpoints.directory} does not restore into this "
        f"config's state ({str(e).splitlines()[0][:200]}); give the --config the run was "
        "trained with") from e
  return task, state, step


# ------------------------------------------------------------------ entry
def run(config, workdir: str, out: str, split: str = "", num_samples: int = 0) -> str:
  """Restores `workdir`'s newest checkpoint and writes the predictions; the summary line."""
  if num_samples < 0:
    raise cli.ConfigError(f"--num_samples = {num_samples}: must be >= 0")
  if config.task not in TASKS:
    raise cli.ConfigError(f"config.task = {config.task!r}: predict writes files for "
                          f"{', '.join(TASKS)}")
  if num_samples and config.task == "gan":
    config = config.copy_and_resolve_references()
    config.eval.num_samples = num_samples
  task, state, step = restore(config, workdir)
  split = split or config.dataset.eval_split
  return f"step {step}, split {split or '-'}: {task.export(state, split, out)}"


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.ERROR)  # not orbax's read-only notices
  config = _CONFIG.value
  try:
    line = run(config, _WORKDIR.value, _OUT.value, _SPLIT.value, _NUM_SAMPLES.value)
  except (ValueError, KeyError) as e:
    if _DEBUG.value:
      raise
    message = str(e).strip("'\"").splitlines()[0] if str(e) else type(e).__name__
    cli.fail(f"{cli.name_field(message, config)} (--debug shows the traceback)")
  if jax.process_index() == 0:
    print(line, flush=True)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir", "out"])  # here: other commands import restore
  app.run(main, flags_parser=cli.parse_flags)
