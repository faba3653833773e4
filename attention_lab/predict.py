"""Predictions as files a benchmark server or an external tool takes.

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
import io
import json
import math
import re

import jax
import numpy as np
from absl import app, flags, logging
from etils import epath
from ml_collections import config_flags

from attention_lab import cli

_CONFIG = cli.define_once(config_flags.DEFINE_config_file, "config", None, "Experiment config file.")
_WORKDIR = cli.define_once(flags.DEFINE_string, "workdir", None, "The trained run's workdir (its checkpoints/).")
_SPLIT = flags.DEFINE_string("split", "", "Dataset split to predict (default: the eval split).")
_OUT = cli.define_once(flags.DEFINE_string, "out", None, "Folder the prediction files are written to.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 0, "GAN: images to write (0: eval.num_samples).")
_DEBUG = cli.define_once(flags.DEFINE_bool, "debug", False, "Show tracebacks instead of one-line errors.")

TASKS = ("segmentation", "detection", "gan", "restoration")
# COCO's 80 category ids in the order of its (and TFDS coco/2017's) contiguous labels.
COCO_CATEGORY_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                     23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
                     46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64,
                     65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88,
                     89, 90)
COCO_RESULT_SETS = {"test": "test-dev2017", "validation": "val2017"}


# ------------------------------------------------------------------ the trained state
def restore(config, workdir: str):
  """(task, state, step): the config's task (any task) and the newest checkpoint in
  `workdir` (a path or URI), in the loop's shardings. cli.ConfigError when the workdir
  holds no checkpoint or it does not restore into this config's state."""
  from attention_lab.train import state as state_lib, tasks, workdir as workdir_lib
  mesh = state_lib.make_mesh(config)
  env = tasks.Environment(mesh, workdir, config.batch_size // jax.process_count())
  task = tasks.create(config, env)
  checkpoints = workdir_lib.Checkpoints(workdir, read_only=True)
  step = checkpoints.latest_step()
  if step is None:
    raise cli.ConfigError(
        f"--workdir = {workdir!r}: no checkpoint in {checkpoints.directory}; train first "
        f"(python -m attention_lab.main --config=... --workdir={workdir})")
  try:
    state, _ = state_lib.TrainState(task, mesh, config.mesh.param_sharding).restore(
        checkpoints, step)
  except Exception as e:  # pylint: disable=broad-except
    raise cli.ConfigError(
        f"checkpoint step {step} in {checkpoints.directory} does not restore into this "
        f"config's state ({str(e).splitlines()[0][:200]}); give the --config the run was "
        "trained with") from e
  return task, state, step


def _save_png(image, path: epath.Path) -> None:
  buffer = io.BytesIO()
  image.save(buffer, "PNG")
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(buffer.getvalue())


def _host(x) -> np.ndarray:
  from jax.experimental import multihost_utils
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)


def _process_slice(builder, split: str) -> tuple[str, int, int]:
  """(this process's sub-split, its first example's index in `split`, the largest slice's
  size): the slices of tfds.split_for_jax_process, whose batches every process steps through
  the same number of times."""
  import tensorflow_datasets as tfds
  subsplits = tfds.even_splits(split, n=jax.process_count())
  sizes = [builder.info.splits[s].num_examples for s in subsplits]
  index = jax.process_index()
  return subsplits[index], sum(sizes[:index]), max(sizes)


def _text(value) -> str:
  return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------ segmentation
def palette_png(labels: np.ndarray, path: str, *, palette: bool = True) -> None:
  """uint8 class indices (H, W) → an indexed PNG with the VOC colour map (mode P), or a
  greyscale one (mode L)."""
  from PIL import Image
  from attention_lab.train.tasks import segmentation
  image = Image.fromarray(np.asarray(labels, np.uint8), mode="L")
  if palette:
    image = image.convert("P")
    image.putpalette(segmentation.palette(256).reshape(-1).tolist())
  _save_png(image, epath.Path(path))


def segmentation_layout(dataset_name: str):
  """(folder under --out, class index → stored value (uint8 array), palette?) per dataset."""
  from attention_lab.data import segmentation as seg_data
  if dataset_name == "voc_segmentation":
    return os.path.join("results", "VOC2012", "Segmentation", "comp6_test_cls"), \
        lambda p: p.astype(np.uint8), True
  if dataset_name == "ade20k_challenge":
    return "", lambda p: (p + 1).astype(np.uint8), False
  if dataset_name == "pascal_context":
    return "", lambda p: (p + 1).astype(np.uint8), True
  if dataset_name.startswith("cityscapes"):
    label_ids = np.zeros(256, np.uint8)
    for label_id, train_id in seg_data.CITYSCAPES_TRAIN_IDS.items():
      label_ids[train_id] = label_id
    return "", lambda p: label_ids[p], False
  return "", lambda p: p.astype(np.uint8), True


def predict_segmentation(task, state, split: str, out: str) -> str:
  import tensorflow as tf
  import tensorflow_datasets as tfds
  from attention_lab.data import availability, pipeline
  from attention_lab.data import segmentation as seg_data
  config = task.config
  spec = seg_data.dataset(config.dataset.name)
  builder = pipeline.get_builder(config.dataset.name, config.dataset.get("data_dir"),
                                 config.dataset.get("manual_dir"), supported=seg_data.DATASETS)
  availability.require_split(config.dataset, builder, split)
  subsplit, offset, largest = _process_slice(builder, split)
  folder, encode, palette = segmentation_layout(config.dataset.name)
  folder = epath.Path(out) / folder
  size, local = config.dataset.eval_size, task.env.local_batch_size
  predict = jax.jit(task.predict)

  def canvas(image):
    """The evaluation's input: decoded (normalised, dataset.resize), fitted into and padded
    to eval_size (a dummy label: test splits have none)."""
    label = np.zeros((*image.shape[:2], 1), np.uint8)
    x, label = seg_data.decode(config, {spec.image_key: image, spec.label_key: label})
    return seg_data.eval_preprocess(x, label, size=size)[0].numpy(), tuple(x.shape[:2])

  def flush(pending):
    images = np.zeros((local, size, size, 3), np.float32)
    for i, (_, image, _) in enumerate(pending):
      images[i] = image
    probs = _host(predict(state, task.env.global_batch({"image": images})["image"]))
    if jax.process_count() > 1:
      probs = probs[jax.process_index() * local:(jax.process_index() + 1) * local]
    for (image_id, _, (decoded, original)), p in zip(pending, probs):
      scale = min(1.0, size / max(decoded))
      fitted = [int(round(s * scale)) for s in decoded]
      p = p[:fitted[0], :fitted[1]]
      if tuple(fitted) != original:
        p = tf.image.resize(p, original, "bilinear").numpy()
      palette_png(encode(np.argmax(p, -1)), folder / f"{image_id}.png",
                  palette=palette)

  examples = tfds.as_numpy(builder.as_dataset(split=subsplit, shuffle_files=False))
  pending, written = [], 0
  for index, example in enumerate(examples):
    image = example[spec.image_key]
    image_id = _text(example["image_id"]) if "image_id" in example else f"{offset + index:05d}"
    x, decoded = canvas(image)
    pending.append((image_id, x, (decoded, tuple(image.shape[:2]))))
    if len(pending) == local:
      flush(pending)
      written, pending = written + len(pending), []
  for _ in range(math.ceil(largest / local) - written // local):  # same batch count everywhere
    flush(pending)
    written, pending = written + len(pending), []
  return f"wrote {written} segmentation PNGs to {folder}"


# ------------------------------------------------------------------ detection
def detection_results(out: dict, image_ids: np.ndarray, category_ids=None) -> list[dict]:
  """COCO results dicts from gathered eval-step outputs (rows padded with `mask`): boxes in
  original pixels, `image_ids[row]`, category `category_ids[label]` (default label + 1)."""
  from attention_lab.evaluation import coco
  rows = coco.detections_array(out["det_boxes"], out["det_scores"], out["det_classes"],
                               out["det_valid"], image_mask=out["mask"])
  results = []
  for row, x, y, w, h, score, category in rows:
    label = int(category) - 1
    results.append({
        "image_id": int(image_ids[int(row)]),
        "category_id": int(category_ids[label]) if category_ids is not None else label + 1,
        "bbox": [round(float(v), 2) for v in (x, y, w, h)], "score": round(float(score), 5)})
  return results


def predict_detection(task, state, split: str, out: str, *, with_outputs: bool = False):
  """Writes the results JSON; returns the summary line, or (line, path, the gathered
  eval-step outputs with each row's "image_id") when `with_outputs` (tests validate the
  file against their ground truth)."""
  import tensorflow_datasets as tfds
  from attention_lab.data import detection as det_data
  from attention_lab.data import pipeline
  config = task.config
  builder = pipeline.get_builder(config.dataset.name, config.dataset.data_dir,
                                 supported=det_data.DATASETS)
  subsplit, offset, largest = _process_slice(builder, split)
  source = builder.as_dataset(split=subsplit, shuffle_files=False)
  local = task.env.local_batch_size
  if "image/id" in builder.info.features:  # COCO's own ids
    ids = np.array([int(e) for e in tfds.as_numpy(source.map(lambda e: e["image/id"]))],
                   np.int32)
  else:
    ids = np.arange(offset, offset + builder.info.splits[subsplit].num_examples, dtype=np.int32)

  def batches():
    """The evaluation's batches with each row's image id (−1: padding), as many on every
    process."""
    position, count, first = 0, 0, None
    for batch in det_data.eval_batches(config, local_batch_size=local, source=source):
      n = int(batch["mask"].sum())
      batch["image_id"] = np.full(local, -1, np.int32)
      batch["image_id"][:n] = ids[position:position + n]
      position, count = position + n, count + 1
      first = first or {k: np.zeros_like(v) for k, v in batch.items()}
      yield batch
    for _ in range(math.ceil(largest / local) - count):
      yield {**first, "image_id": np.full(local, -1, np.int32)}

  gathered = task._gathered_outputs(state, batches())  # pylint: disable=protected-access
  category_ids = COCO_CATEGORY_IDS if config.dataset.name.startswith("coco") else None
  results = detection_results(gathered, gathered["image_id"], category_ids)
  name = f"detections_{result_set(split)}_attention_lab_results.json"
  path = epath.Path(out) / name
  if jax.process_index() == 0:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results))
  line = f"wrote {len(results)} detections of {int(gathered['mask'].sum())} images to {path}"
  return (line, path, gathered) if with_outputs else line


def result_set(split: str) -> str:
  """The <testset> of COCO's results file name: test-dev2017 for the whole `test` split,
  val2017 for `validation`, else the split with its slice made file-safe."""
  return COCO_RESULT_SETS.get(split) or re.sub(r"[^\w.-]+", "-", split).strip("-")


# ------------------------------------------------------------------ GAN
def predict_gan(task, state, out: str, num_samples: int) -> str:
  from PIL import Image
  n = num_samples or int(task.config.eval.num_samples)
  classes = max(task.num_classes, 1) if task.conditional else 1
  # Chunks of whole class cycles keep every chunk class-balanced, like one call would.
  chunk = max(classes, int(task.config.eval.batch_size) // classes * classes)
  written = 0
  for index in range(math.ceil(n / chunk)):
    images, labels = task.samples(state, min(chunk, n - written), seed_offset=index)
    if jax.process_index() == 0:
      for image, label in zip(images, labels):
        folder = epath.Path(out) / f"{int(label):04d}" if task.conditional else epath.Path(out)
        _save_png(Image.fromarray(np.asarray(image, np.uint8)), folder / f"{written:06d}.png")
        written += 1
    else:
      written += len(images)
  kind = f"{classes} class folders" if task.conditional else "one folder"
  return f"wrote {written} samples as PNGs ({kind}) to {out}"


# ------------------------------------------------------------------ restoration
def predict_restoration(task, state, split: str, out: str) -> str:
  import tifffile
  from attention_lab.data import restoration as res_data
  config = task.config.copy_and_resolve_references()
  config.dataset.eval_split = split
  written = 0
  for image, _, name in res_data.eval_examples(config):
    prediction = np.asarray(task.predict(state, image), np.float32)
    if prediction.shape[-1] == 1:
      prediction = prediction[..., 0]
    if jax.process_index() == 0:
      buffer = io.BytesIO()
      tifffile.imwrite(buffer, prediction)
      epath.Path(out).mkdir(parents=True, exist_ok=True)
      (epath.Path(out) / f"{name}.tif").write_bytes(buffer.getvalue())
    written += 1
  return f"wrote {written} restored TIFFs to {out}"


# ------------------------------------------------------------------ entry
def run(config, workdir: str, out: str, split: str = "", num_samples: int = 0) -> str:
  """Restores `workdir`'s newest checkpoint and writes the predictions; the summary line."""
  if num_samples < 0:
    raise cli.ConfigError(f"--num_samples = {num_samples}: must be >= 0")
  if config.task not in TASKS:
    raise cli.ConfigError(f"config.task = {config.task!r}: predict writes files for "
                          f"{', '.join(TASKS)}")
  task, state, step = restore(config, workdir)
  split = split or config.dataset.get("eval_split", "")
  if config.task == "segmentation":
    line = predict_segmentation(task, state, split, out)
  elif config.task == "detection":
    line = predict_detection(task, state, split, out)
  elif config.task == "gan":
    line = predict_gan(task, state, out, num_samples)
  else:
    line = predict_restoration(task, state, split, out)
  return f"step {step}, split {split or '-'}: {line}"


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.ERROR)  # not orbax's read-only notices
  with cli.silenced_stderr(not flags.FLAGS["verbosity"].present):
    import tensorflow_datasets as tfds
    tfds.disable_progress_bar()
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
