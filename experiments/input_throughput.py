"""Input-pipeline rate of every paper config, on the Grain path and on the tf.data path it
replaced, side by side, against what one accelerator host needs: can this host's CPUs feed
it? Train examples per second of a config's input pipeline (read, decode, augment, batch;
no model), on 1 core and on all of them.

  python -m experiments.input_throughput [--configs=a.py,b.py] [--seconds=10] [--windows=3]
      [--warmup=5] [--batch_size=32] [--examples=300] [--cores=1,all] [--paths=grain,tf.data]
      [--data_root=DIR] [--table_only]

Every paper train config (configs/{sanet,aa,kanet,hamburger,isa}/*.py) →
experiments/results/input_throughput.{md,json}; `--configs` (FILE[:preset], comma-separated)
replaces only their rows.

The two paths:
- grain: the task's own `train_batches(0)` (`tasks.create(config, env)`: the stream a run
  trains on; data/pipeline.py), reading ArrayRecord files; on 1 core in the measuring
  process (its reading threads), on n > 1 cores with n decoding worker processes
  (`dataset.workers`).
- tf.data: the library's input path before Grain, kept only here for this comparison
  (`tf_data_stream`, the "tf.data baseline" section below): TFDS `as_dataset` over TFRecord
  files, a shuffle buffer, TensorFlow's image ops in a parallel map, batching, prefetch.
Both read the same records: the stand-in files are written as TFRecord and converted to
ArrayRecord beside them (data/prepare.py), so a dataset folder holds both formats.

Data: the config's real dataset where it is prepared on this host in both formats;
otherwise stand-in files in the dataset's real on-disk format
(experiments/stand_in_files.py: a prepared TFDS directory written with the builder's own
features, or the manual-download layout our builders prepare), `--examples` of them,
repeated by the pipeline; embedded datasets are generated. The tf.data shuffle buffer
holds min(SHUFFLE_BUFFER, examples) encoded records.

Measurement: each (path, core count) runs in a fresh process that, before TensorFlow
starts, (1) pins itself to that many cores with `os.sched_setaffinity` (its worker
processes inherit the mask), so "1 core" is one core however many threads and processes,
and (2) sizes TF's intra- and inter-op pools and tf.data's private pool to the same count.
After `--warmup` seconds (buffers fill, the first batches are prefetched) it counts
examples over `--windows` windows of `--seconds` each, whole batches, at `--batch_size`
examples per batch, and reports their median. A GAN batch holds d_steps images per batch
element; all are counted.

Two rates per window: examples per wall second, and examples per CPU-second (user +
system time of the process and its worker processes, every thread). The wall rate falls
when other jobs share the cores; the CPU-second rate hardly does: it is what one core
dedicated to this pipeline delivers, so the cores an accelerator host needs are computed
from the 1-core run's CPU-second rate. (It leaves out time the pipeline waits on the
disk; here the files are in the page cache.)

Needed rate: what one accelerator host consumes when the train step runs at its roofline
time, needed examples/s = per-host batch / step time (× d_steps for a GAN):
- TPU v5e host (4 chips, as ct5lp-hightpu-4t: 4 v5e chips, 112 vCPUs; the v5e:2x2 slice
  is one such host): the per-chip batch and roofline step time of `attention_lab.aot`'s
  v5e:2x2 compile (experiments/results/aot/<config>_v5e_2x2.json), or of v5e:4x4 where
  2x2 does not fit, × 4 chips.
- 8×H100 host: the GPU aot rows (experiments/results/aot_gpu.json, h100x8) where present;
  otherwise the roofline of the TPU compile's costs on 8 H100s: time per example =
  max(FLOPs / peak at the model's dtype, bytes accessed / HBM bandwidth) (FLOPs and bytes
  per example = per chip × chips / global batch; H100 SXM figures from
  `attention_lab.devices`). Bytes count too: the small ImageNet nets are memory-bound,
  and FLOPs alone would claim ~60× their rate. XLA:GPU fuses differently from XLA:TPU,
  so this is an estimate.
Cores needed = needed rate / the grain path's 1-core examples per CPU-second.
"""

import datetime
import glob
import json
import multiprocessing
import os
import statistics
import tempfile
import time

from absl import app, flags
from etils import epath, epy

from attention_lab import cli

with epy.lazy_imports():  # each measuring process pins its cores before TensorFlow starts
  import tensorflow as tf
  import tensorflow_datasets as tfds

# experiments.measure (jax) and experiments.stand_in_files (TFDS) are imported where they are
# used: each measuring process imports this module, and pins its cores before TF starts.

_CONFIGS = cli.define_once(flags.DEFINE_list, "configs", None,
                           "Config files (default: every paper config).")
_TABLE_ONLY = cli.define_once(flags.DEFINE_bool, "table_only", False,
                              "Only rebuild the table from the JSON.")
_SECONDS = flags.DEFINE_float("seconds", 10.0, "Length of one measuring window.")
_WINDOWS = flags.DEFINE_integer("windows", 3, "Measuring windows (the median is reported).")
_WARMUP = flags.DEFINE_float("warmup", 5.0, "Seconds of batches read before measuring.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Examples per batch (at most config.batch_size).")
_EXAMPLES = flags.DEFINE_integer("examples", 300, "Stand-in examples written when the real "
                                 "data are not prepared.")
_CORES = flags.DEFINE_list("cores", ["1", "all"], "Core counts to measure ('all': every core "
                           "this process may use).")
_PATHS = flags.DEFINE_list("paths", ["grain", "tf.data"], "Input paths to measure.")
_DATA_ROOT = flags.DEFINE_string("data_root", "", "Where stand-in files go (default: a "
                                 "temporary directory, removed afterwards).")

PATHS = ("grain", "tf.data")
# Datasets made here from bundled data (prepared on first use, no download).
EMBEDDED = ("digits", "digit_scenes", "restoration_photos", "synthetic_volumes")
SHUFFLE_BUFFER = 2048  # the tf.data path's buffer, in records (capped at the examples)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # detection's: ImageNet's
V5E_CHIPS_PER_HOST = 4
H100_PER_HOST = 8


def available_cores() -> list[int]:
  return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(
      range(os.cpu_count()))


# Data ----------------------------------------------------------------------------------------

def _folder(dataset) -> str | None:
  """The prepared folder of `dataset` (any format), or None."""
  from attention_lab.data import availability  # pylint: disable=g-import-not-at-top
  found = availability.find_prepared(dataset.name, dataset.get("data_dir", ""))
  return None if found is None else str(found.data_dir)


def real_data_prepared(config) -> bool:
  """Whether config.dataset is prepared here in both formats (TFRecord for tf.data,
  ArrayRecord for grain), or read from a JPEG folder (dataset.image_dir)."""
  dataset = config.dataset
  if dataset.get("image_dir") and epath.Path(dataset.image_dir).is_dir():
    return True
  folder = _folder(dataset)
  if folder is None:
    return False
  formats = {f.value for f in tfds.builder_from_directory(folder).info.available_file_formats()}
  return {"tfrecord", "array_record"} <= formats


def both_formats(dataset) -> None:
  """Prepares `dataset` (config.dataset) as TFRecord, as TFDS does by default (an embedded
  dataset, or one from the stand-in manual files), and converts it to ArrayRecord beside."""
  from attention_lab.data import availability, prepare  # pylint: disable=g-import-not-at-top
  folder = _folder(dataset)
  if folder is None:
    builder = availability.builder(dataset.name, dataset.data_dir)
    manual = dataset.get("manual_dir") or None
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=manual))
    folder = str(builder.data_dir)
  formats = {f.value for f in tfds.builder_from_directory(folder).info.available_file_formats()}
  if "array_record" not in formats:
    prepare.convert_to_array_record(folder)


def with_data(config, root: str, num_examples: int):
  """(config reading the real data or stand-ins written under `root`, "real" | "stand-in")."""
  from experiments import stand_in_files  # pylint: disable=g-import-not-at-top
  config = config.copy_and_resolve_references()
  if real_data_prepared(config):
    return config, "real"
  with config.unlocked():
    if config.dataset.name.split("/")[0] in EMBEDDED:
      config.dataset.data_dir = os.path.join(root, "tfds")
      source = "embedded"
    else:
      overrides = stand_in_files.write(config, root, num_examples, seed=config.seed)
      config.dataset.update(overrides)
      source = "stand-in"
  if not config.dataset.get("image_dir"):
    both_formats(config.dataset)
    if source == "stand-in" and config.dataset.name not in stand_in_files.TFDS_NAMES:
      from attention_lab.data import info  # pylint: disable=g-import-not-at-top
      real = info.lookup(config.dataset.name).num_examples(config.dataset.train_split)
      stand_in_files.claim_real_size(_folder(config.dataset), num_examples, real)
  return config, source


# The tf.data baseline ------------------------------------------------------------------------
# The library's input path before Grain, kept only to compare with: TFDS as_dataset over
# TFRecord, a shuffle buffer, TensorFlow's image ops (stateless, seeded by the stream
# index) in a parallel map. data/transforms ports these maps to numpy; tests/data/
# test_transforms.py checks the ports against them.

def tf_data_options(threads: int):
  options = tf.data.Options()
  options.deterministic = True
  options.threading.private_threadpool_size = threads
  options.autotune.enabled = False  # the autotuner idled seconds when an iterator was destroyed
  return options


def tf_resumable_batches(examples, augment, *, seed: int, shuffle_buffer: int,
                         batch_shape: tuple[int, ...], threads: int):
  """Endless numpy batches of `augment(example, stateless seed)` over the repeated,
  shuffled `examples` (the old data/pipeline.py `resumable_batches`)."""

  def augment_indexed(index, example):
    return augment(example, tf.stack([tf.constant(seed, tf.int64), index]))

  ds = examples.repeat().enumerate().shuffle(shuffle_buffer, seed=seed)
  ds = ds.map(augment_indexed, num_parallel_calls=tf.data.AUTOTUNE)
  for size in reversed(batch_shape):
    ds = ds.batch(size, drop_remainder=True)
  return iter(tfds.as_numpy(ds.with_options(tf_data_options(threads)).prefetch(2)))


def _normalize(image, stats):
  mean, std = stats
  return (tf.cast(image, tf.float32) / 255.0 - mean) / std


def _resize_shorter(image, size):
  shape = tf.cast(tf.shape(image)[:2], tf.float32)
  new = tf.cast(tf.round(shape * (size / tf.reduce_min(shape))), tf.int32)
  return tf.image.resize(image, new, antialias=True)


def classification_preprocess(config, example, *, train: bool, seed=None):
  """{'image': normalised float32 (S, S, C), 'label': int32}: digits resized / tiled;
  CIFAR reflect-pad 4, random 32 crop and flip; ImageNet "resize" (shorter side
  S·256/224, random crop, flip) or "inception" (random area/aspect crop, flip);
  evaluation: shorter side S·256/224, centre crop."""
  from attention_lab.data import info  # pylint: disable=g-import-not-at-top
  name, size = config.dataset.name, config.dataset.image_size
  image = tf.cast(example["image"], tf.float32)
  if name == "digits":
    image = tf.image.resize(image, (size, size)) if size != 32 else image
    if config.dataset.channels == 3:
      image = tf.image.grayscale_to_rgb(image)
  elif name.startswith("cifar"):
    if train:
      image = tf.pad(image, [[4, 4], [4, 4], [0, 0]], mode="REFLECT")
      image = tf.image.stateless_random_crop(image, (32, 32, 3), seed=seed)
      image = tf.image.stateless_random_flip_left_right(image, seed=seed + 1)
    if size != 32:
      image = tf.image.resize(image, (size, size))
  else:
    if train and config.dataset.crop == "inception":
      begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
          tf.shape(image), tf.zeros([0, 0, 4], tf.float32), seed=seed,
          area_range=(0.08, 1.0), aspect_ratio_range=(3 / 4, 4 / 3), min_object_covered=0.0,
          use_image_if_no_bounding_boxes=True)
      image = tf.image.resize(tf.slice(image, begin, crop), (size, size), antialias=True)
    elif train:
      image = _resize_shorter(image, round(size * 256 / 224))
      image = tf.image.stateless_random_crop(image, (size, size, 3), seed=seed)
    else:
      image = _resize_shorter(image, round(size * 256 / 224))
      h, w = tf.shape(image)[0], tf.shape(image)[1]
      image = tf.image.crop_to_bounding_box(image, (h - size) // 2, (w - size) // 2, size, size)
    if train:
      image = tf.image.stateless_random_flip_left_right(image, seed=seed + 1)
  image = tf.clip_by_value(image, 0.0, 255.0)
  return {"image": _normalize(image, info.lookup(name).stats),
          "label": tf.cast(example["label"], tf.int32)}


def segmentation_decode(config, example):
  """(image float32 (H, W, 3) normalised, label int32 (H, W, 1), 255 = ignore)."""
  from attention_lab.data import segmentation  # pylint: disable=g-import-not-at-top
  spec = segmentation.facts(config.dataset.name)
  image = _normalize(example[spec.image_key], spec.stats)
  label = tf.cast(example[spec.label_key], tf.int32)
  table = segmentation.label_table(config.dataset.name)
  if table is not None:
    label = tf.gather(tf.constant(table), label)
  if config.dataset.resize:
    size = (config.dataset.resize,) * 2
    image, label = tf.image.resize(image, size), tf.image.resize(label, size, "nearest")
  return image, label


def _pad_to(image, label, size):
  h, w = tf.shape(image)[0], tf.shape(image)[1]
  pads = [[0, tf.maximum(size - h, 0)], [0, tf.maximum(size - w, 0)], [0, 0]]
  return tf.pad(image, pads), tf.pad(label, pads, constant_values=255)


def segmentation_train(image, label, *, crop: int, scale_range=(0.5, 2.0), flip=True, seed):
  """Random scale, pad, crop (image and label together), flip."""
  shape = tf.cast(tf.shape(image)[:2], tf.float32)
  scale = tf.random.stateless_uniform([], seed=seed, minval=scale_range[0],
                                      maxval=scale_range[1])
  size = tf.cast(tf.round(shape * scale), tf.int32)
  image, label = _pad_to(tf.image.resize(image, size), tf.image.resize(label, size, "nearest"),
                         crop)
  both = tf.concat([image, tf.cast(label, tf.float32)], axis=-1)
  both = tf.image.stateless_random_crop(both, (crop, crop, image.shape[-1] + 1), seed=seed + 1)
  if flip:
    both = tf.image.stateless_random_flip_left_right(both, seed=seed + 2)
  return both[..., :-1], tf.cast(tf.round(both[..., -1]), tf.int32)


def segmentation_eval(image, label, *, size: int):
  """Full resolution, padded to size×size (resized to fit first if larger)."""
  shape = tf.shape(image)[:2]
  scale = tf.minimum(1.0, size / tf.cast(tf.reduce_max(shape), tf.float32))
  new = tf.cast(tf.round(tf.cast(shape, tf.float32) * scale), tf.int32)
  image, label = _pad_to(tf.image.resize(image, new), tf.image.resize(label, new, "nearest"),
                         size)
  return tf.ensure_shape(image, (size, size, 3)), tf.ensure_shape(label[..., 0], (size, size))


def _objects(example):
  objects = example["objects"]
  crowd = objects.get("is_crowd", tf.zeros_like(objects["label"], tf.bool))
  area = objects.get("area", tf.zeros_like(objects["label"], tf.int64))
  return (tf.cast(objects["bbox"], tf.float32), tf.cast(objects["label"], tf.int32),
          tf.cast(crowd, tf.bool), tf.cast(area, tf.float32))


def _pad_boxes(boxes, max_boxes):
  n = tf.minimum(tf.shape(boxes)[0], max_boxes)
  return tf.pad(boxes[:n], [[0, max_boxes - n]] + [[0, 0]] * (len(boxes.shape) - 1))


def detection_train(example, *, size: int, scale_range, flip: bool, max_boxes: int,
                    min_box_size: float, seed):
  """Scale jitter, crop / pad to size², flip; boxes in input pixels."""
  image = tf.cast(example["image"], tf.float32)
  boxes, labels, crowd, _ = _objects(example)
  boxes, labels = tf.boolean_mask(boxes, ~crowd), tf.boolean_mask(labels, ~crowd)
  seeds = tf.random.experimental.stateless_split(seed, 4)
  hw = tf.cast(tf.shape(image)[:2], tf.float32)
  scale = tf.random.stateless_uniform([], seeds[0], scale_range[0], scale_range[1])
  new_hw = tf.maximum(tf.round(hw * scale * size / tf.reduce_max(hw)), 1.0)
  image = tf.image.resize(image, tf.cast(new_hw, tf.int32), antialias=True)
  boxes = boxes * tf.concat([new_hw, new_hw], 0)
  room = tf.maximum(new_hw - size, 0.0)
  offset = tf.minimum(tf.floor(tf.random.stateless_uniform([2], seeds[1]) * (room + 1.0)), room)
  oy, ox = tf.cast(offset[0], tf.int32), tf.cast(offset[1], tf.int32)
  image = tf.image.pad_to_bounding_box(image[oy:oy + size, ox:ox + size], 0, 0, size, size)
  window = tf.minimum(new_hw - offset, float(size))
  boxes = boxes - tf.concat([offset, offset], 0)
  boxes = tf.concat([tf.clip_by_value(boxes[:, :2], 0.0, window),
                     tf.clip_by_value(boxes[:, 2:], 0.0, window)], 1)
  big = ((boxes[:, 2] - boxes[:, 0] >= min_box_size)
         & (boxes[:, 3] - boxes[:, 1] >= min_box_size))
  boxes, labels = tf.boolean_mask(boxes, big), tf.boolean_mask(labels, big)
  if flip:
    do_flip = tf.random.stateless_uniform([], seeds[2]) < 0.5
    image = tf.cond(do_flip, lambda: image[:, ::-1], lambda: image)
    flipped = tf.stack([boxes[:, 0], size - boxes[:, 3], boxes[:, 2], size - boxes[:, 1]], 1)
    boxes = tf.cond(do_flip, lambda: flipped, lambda: boxes)
  image = tf.clip_by_value(image, 0.0, 255.0)
  n = tf.minimum(tf.shape(boxes)[0], max_boxes)
  return {"image": _normalize(image, (MEAN, STD)), "boxes": _pad_boxes(boxes, max_boxes),
          "labels": _pad_boxes(labels, max_boxes), "box_mask": tf.range(max_boxes) < n}


def detection_eval(example, *, size: int, max_boxes: int):
  """Longer side to `size`, padded to size²; ground truth in original pixels."""
  image = tf.cast(example["image"], tf.float32)
  boxes, labels, crowd, area = _objects(example)
  hw = tf.cast(tf.shape(image)[:2], tf.float32)
  scale = size / tf.reduce_max(hw)
  if image.shape[0] != size or image.shape[1] != size:
    image = tf.image.resize(image, tf.cast(tf.maximum(tf.round(hw * scale), 1.0), tf.int32),
                            antialias=True)
    image = tf.image.pad_to_bounding_box(image, 0, 0, size, size)
  image = tf.clip_by_value(image, 0.0, 255.0)
  boxes = boxes * tf.concat([hw, hw], 0)
  box_area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
  n = tf.minimum(tf.shape(boxes)[0], max_boxes)
  return {"image": _normalize(image, (MEAN, STD)), "boxes": _pad_boxes(boxes, max_boxes),
          "labels": _pad_boxes(labels, max_boxes), "crowd": _pad_boxes(crowd, max_boxes),
          "area": _pad_boxes(tf.where(area > 0, area, box_area), max_boxes),
          "box_mask": tf.range(max_boxes) < n, "scale": scale, "image_size": hw}


def restoration_crop(example, patch, seed):
  """A random `patch` of the input and the aligned region of the target."""
  x, y = example["input"], example["target"]
  rank_in, rank_out = len(patch), len(y.shape) - 1
  patch_t = tf.constant(patch, tf.int32)
  limit = tf.maximum(tf.shape(x)[:rank_in] - patch_t + 1, 1)
  offsets = tf.cast(tf.floor(tf.random.stateless_uniform([rank_in], seed) *
                             tf.cast(limit, tf.float32)), tf.int32)
  offsets = tf.minimum(offsets, limit - 1)
  x = tf.slice(x, tf.concat([offsets, [0]], 0), tf.concat([patch_t, [-1]], 0))
  drop = rank_in - rank_out
  y = tf.slice(y, tf.concat([offsets[drop:], [0]], 0), tf.concat([patch_t[drop:], [-1]], 0))
  return (tf.ensure_shape(x, list(patch) + [None]),
          tf.ensure_shape(y, list(patch[drop:]) + [None]))


def restoration_augment(x, y, seed):
  """Random flips of the last two spatial axes and, for square patches, 90° rotations."""
  r = tf.random.stateless_uniform([3], seed)
  ax_x, ax_y = len(x.shape) - 3, len(y.shape) - 3
  for i in (0, 1):
    flip = r[i] < 0.5
    x = tf.cond(flip, lambda: tf.reverse(x, [ax_x + i]), lambda: x)
    y = tf.cond(flip, lambda: tf.reverse(y, [ax_y + i]), lambda: y)
  if x.shape[ax_x] == x.shape[ax_x + 1]:
    swap = lambda t, a: tf.transpose(t, [*range(a), a + 1, a, *range(a + 2, len(t.shape))])
    rotate = r[2] < 0.5
    x = tf.cond(rotate, lambda: swap(x, ax_x), lambda: x)
    y = tf.cond(rotate, lambda: swap(y, ax_y), lambda: y)
  return x, y


def gan_preprocess(config, example):
  """{"image": float32 (S, S, 3) in [−1, 1], "label": int32}: CelebA's centre 160 crop,
  ImageNet's centre square, resized with antialiasing; grey tiled to RGB."""
  name, size = config.dataset.name, config.dataset.image_size
  image = tf.cast(example["image"], tf.float32)
  h, w = tf.shape(image)[0], tf.shape(image)[1]
  if name in ("celeb_a", "imagenet2012"):
    side = tf.minimum(h, w) if name == "imagenet2012" else tf.minimum(tf.minimum(h, w), 160)
    image = tf.image.crop_to_bounding_box(image, (h - side) // 2, (w - side) // 2, side, side)
  if name in ("celeb_a", "imagenet2012") or image.shape[0] != size:
    image = tf.image.resize(image, (size, size), antialias=True)
  image = tf.reshape(image, (size, size, -1))
  if image.shape[-1] == 1:
    image = tf.tile(image, (1, 1, 3))
  return {"image": tf.clip_by_value(image, 0.0, 255.0) / 127.5 - 1.0,
          "label": tf.cast(example.get("label", 0), tf.int32)}



def _tf_examples(config):
  """The train split's examples as tf.data reads them: TFRecord (or the JPEG folder)."""
  d = config.dataset
  if d.get("image_dir"):
    from attention_lab.data import gan  # pylint: disable=g-import-not-at-top
    files = [str(f) for f in gan._celeba_files(d.image_dir, d.train_split)]  # pylint: disable=protected-access
    return tf.data.Dataset.from_tensor_slices(files).map(
        lambda f: {"image": tf.io.decode_image(tf.io.read_file(f), channels=3,
                                               expand_animations=False)}), len(files)
  builder = tfds.builder_from_directory(_folder(d), file_format="tfrecord")
  return (builder.as_dataset(split=d.train_split, shuffle_files=False),
          builder.info.splits[d.train_split].num_examples)


def _tf_augment(config):
  """The per-example map of the config's task on the tf.data path."""
  task, d = config.task, config.dataset
  if task == "classification":
    return lambda ex, seed: classification_preprocess(config, ex, train=True, seed=seed)
  if task == "segmentation":
    return lambda ex, seed: dict(zip(("image", "label"), segmentation_train(
        *segmentation_decode(config, ex), crop=d.crop_size,
        scale_range=(d.scale_min, d.scale_max), flip=d.flip, seed=seed)))
  if task == "detection":
    return lambda ex, seed: detection_train(
        ex, size=d.image_size, scale_range=tuple(d.scale_range), flip=d.flip,
        max_boxes=d.max_boxes, min_box_size=d.min_box_size, seed=seed)
  if task == "restoration":
    def crop(ex, seed):
      x, y = restoration_crop(ex, tuple(d.patch_size), seed)
      x, y = restoration_augment(x, y, seed + 1) if d.augment else (x, y)
      return {"input": x, "target": y}
    return crop
  return lambda ex, seed: gan_preprocess(config, ex)


def tf_data_stream(config, batch_size: int, threads: int):
  """The tf.data train stream of `config` at `batch_size` examples per batch."""
  examples, count = _tf_examples(config)
  shape = (batch_size, int(config.d_steps)) if config.task == "gan" else (batch_size,)
  return tf_resumable_batches(examples, _tf_augment(config), seed=config.seed,
                              shuffle_buffer=min(SHUFFLE_BUFFER, count), batch_shape=shape,
                              threads=threads)


# Measurement ---------------------------------------------------------------------------------

def cpu_seconds() -> float:
  """User + system CPU time of this process and its live child processes (grain's workers)."""
  import psutil  # pylint: disable=g-import-not-at-top
  me = psutil.Process()
  total = sum(me.cpu_times()[:2])
  for child in me.children(recursive=True):
    try:
      total += sum(child.cpu_times()[:2])
    except psutil.NoSuchProcess:
      pass
  return total


def measure_in_process(config, batch_size: int, seconds: float, windows: int, warmup: float,
                       path: str = "grain", cores: int = 1) -> dict:
  """Examples/s of this process's train stream on `path`: median of `windows` windows; the
  grain path decodes in `cores` worker processes when cores > 1."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import AxisType  # pylint: disable=g-import-not-at-top
  from attention_lab.train import tasks  # pylint: disable=g-import-not-at-top
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.batch_size = batch_size
    config.dataset.workers = cores if cores > 1 else 0
  if path == "grain":
    mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,),
                         devices=jax.devices()[:1])
    task = tasks.create(config, tasks.Environment(mesh, tempfile.gettempdir(), batch_size))
    batches = task.train_batches(0)
  else:
    batches = tf_data_stream(config, batch_size, cores)
  per_batch = batch_size * (int(config.d_steps) if config.task == "gan" else 1)
  start, first = time.perf_counter(), None
  while first is None or time.perf_counter() - start < warmup:
    batch = next(batches)
    first = first or time.perf_counter() - start
  rates, cpu_rates = [], []
  for _ in range(windows):
    count, start, cpu_start = 0, time.perf_counter(), cpu_seconds()
    while not count or time.perf_counter() - start < seconds:
      next(batches)
      count += 1
    rates.append(count * per_batch / (time.perf_counter() - start))
    cpu_rates.append(count * per_batch / max(cpu_seconds() - cpu_start, 1e-9))
  if hasattr(batches, "close"):
    batches.close()
  shapes = {k: list(v.shape) for k, v in batch.items()}
  return {"examples_per_s": statistics.median(rates), "window_rates": rates,
          "examples_per_cpu_s": statistics.median(cpu_rates), "window_cpu_rates": cpu_rates,
          "first_batch_s": first, "batch_shapes": shapes, "examples_per_batch": per_batch,
          "workers": config.dataset.workers if path == "grain" else 0}


def _worker(config, path, cores, batch_size, seconds, windows, warmup, queue):
  """A fresh process: pinned to `cores` and TF pools of that size before TF starts."""
  os.sched_setaffinity(0, cores)
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the pipeline only; no accelerator needed
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  flags.FLAGS.mark_as_parsed()
  if path == "tf.data":
    tf.config.threading.set_intra_op_parallelism_threads(len(cores))
    tf.config.threading.set_inter_op_parallelism_threads(len(cores))
    tf.config.set_visible_devices([], "GPU")
  try:
    result = measure_in_process(config, batch_size, seconds, windows, warmup, path, len(cores))
    queue.put({**result, "affinity": sorted(os.sched_getaffinity(0))})
  except Exception as e:  # pylint: disable=broad-except
    queue.put({"error": f"{type(e).__name__}: {e}"})


def measure_on_cores(config, cores: list[int], *, batch_size: int, seconds: float,
                     windows: int, warmup: float, path: str = "grain") -> dict:
  """`measure_in_process` in a fresh process restricted to `cores` (see the module docstring)."""
  context = multiprocessing.get_context("spawn")
  queue = context.Queue()
  process = context.Process(target=_worker, args=(config, path, list(cores), batch_size,
                                                   seconds, windows, warmup, queue))
  process.start()
  result = queue.get()
  process.join()
  if "error" in result:
    raise RuntimeError(f"measuring {path} on {len(cores)} core(s) failed: {result['error']}")
  return {**result, "cores": len(cores)}


# What an accelerator host needs --------------------------------------------------------------

def config_stem(config_path: str) -> str:
  """configs/sanet/imagenet.py → sanet_imagenet (the aot results' file names)."""
  path = config_path.split(":")[0]
  path = path[len("configs/"):] if path.startswith("configs/") else os.path.basename(path)
  return path[:-len(".py")].replace("/", "_")


def _read(path):
  with open(path) as f:
    return json.load(f)


def v5e_host_need(aot_dir: str, stem: str, images_per_element: int = 1) -> dict | None:
  """Examples/s one 4-chip v5e host consumes at the aot roofline step time."""
  for topology in ("v5e_2x2", "v5e_4x4"):
    path = os.path.join(aot_dir, "aot", f"{stem}_{topology}.json")
    if not os.path.exists(path):
      continue
    row = _read(path)
    if not row.get("fits", True) and topology == "v5e_2x2":
      continue
    host_batch = row["global_batch"] * V5E_CHIPS_PER_HOST / row["chips"]
    return {"source": f"aot {topology.replace('_', ':', 1)}", "host_batch": host_batch,
            "step_time_s": row["step_time_s"],
            "examples_per_s": host_batch * images_per_element / row["step_time_s"]}
  return None


def cost_per_example(aot_dir: str, stem: str) -> dict | None:
  """Train-step FLOPs and bytes accessed per batch element, from the TPU compile (per chip ×
  chips / global batch)."""
  for topology in ("v5e_2x2", "v5e_4x4"):
    path = os.path.join(aot_dir, "aot", f"{stem}_{topology}.json")
    if os.path.exists(path):
      row = _read(path)
      return {"flops": row["flops"] * row["chips"] / row["global_batch"],
              "bytes": row["bytes_accessed"] * row["chips"] / row["global_batch"]}
  return None


def _gpu_row(aot_dir: str, stem: str) -> dict | None:
  path = os.path.join(aot_dir, "aot_gpu.json")
  if not os.path.exists(path):
    return None
  rows = _read(path)
  rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
  for row in rows:
    if (config_stem(str(row.get("config", ""))) == stem and str(row.get("topology")) == "h100x8"
        and row.get("step_time_s") and row.get("global_batch")):
      return row
  return None


def h100_host_need(aot_dir: str, stem: str, dtype: str, images_per_element: int = 1
                   ) -> dict | None:
  """Examples/s one 8×H100 host consumes: the GPU aot row, else 8 / the roofline time of
  one example, max(FLOPs / peak, bytes / HBM bandwidth), with the TPU compile's costs."""
  from attention_lab import devices  # pylint: disable=g-import-not-at-top
  row = _gpu_row(aot_dir, stem)
  if row is not None:
    return {"source": "aot h100x8", "step_time_s": row["step_time_s"],
            "examples_per_s": row["global_batch"] * images_per_element / row["step_time_s"]}
  cost = cost_per_example(aot_dir, stem)
  if cost is None:
    return None
  h100 = devices.lookup("H100")
  seconds = max(cost["flops"] / h100.peak(dtype), cost["bytes"] / h100.memory_bandwidth)
  return {"source": f"TPU-compile FLOPs and bytes / H100 {dtype} roofline",
          "flops_per_example": cost["flops"], "bytes_per_example": cost["bytes"],
          "examples_per_s": H100_PER_HOST / seconds * images_per_element}


def cores_needed(needed_rate: float, rate_per_core: float) -> float:
  return needed_rate / rate_per_core


# One config --------------------------------------------------------------------------------

def run(config, config_path: str, *, batch_size: int, seconds: float, windows: int,
        warmup: float, examples: int, core_counts: list[str], data_root: str,
        aot_dir: str, paths=PATHS) -> dict:
  """The whole measurement of one config: data, rates per path and core count, needs."""
  batch_size = min(batch_size, config.batch_size)
  everything = available_cores()
  with tempfile.TemporaryDirectory() as scratch:
    config, source = with_data(config, data_root or scratch, examples)
    rates = {path: {} for path in paths}
    for path in paths:
      for count in core_counts:
        cores = everything if count == "all" else everything[:int(count)]
        rates[path][str(len(cores))] = measure_on_cores(
            config, cores, batch_size=batch_size, seconds=seconds, windows=windows,
            warmup=warmup, path=path)
  stem = config_stem(config_path)
  per_element = int(config.get("d_steps", 1) or 1) if config.get("task") == "gan" else 1
  dtype = config.model.get("dtype", "float32") if "model" in config else "float32"
  result = {"config": config_path, "dataset": config.dataset.name, "data": source,
            "batch_size": batch_size, "rates": rates, "images_per_batch_element": per_element,
            "v5e_host": v5e_host_need(aot_dir, stem, per_element),
            "h100x8_host": h100_host_need(aot_dir, stem, dtype, per_element)}
  one = rates.get("grain", {}).get("1", {}).get("examples_per_cpu_s")
  for host in ("v5e_host", "h100x8_host"):
    if result[host] and one:
      result[host]["cores_needed"] = cores_needed(result[host]["examples_per_s"], one)
  return result


def summary(result: dict) -> str:
  lines = [f"{result['config']}: {result['dataset']} ({result['data']} data), "
           f"batches of {result['batch_size']}"]
  for path, by_cores in result["rates"].items():
    for cores, r in by_cores.items():
      lines.append(f"  {path} {cores} core(s): {r['examples_per_s']:.1f} examples/s (windows "
                   f"{', '.join(f'{x:.1f}' for x in r['window_rates'])}); "
                   f"{r['examples_per_cpu_s']:.1f} examples per CPU-second")
  for host, label in (("v5e_host", "TPU v5e host (4 chips)"), ("h100x8_host", "8×H100 host")):
    need = result[host]
    if need is None:
      lines.append(f"  {label}: no aot result for this config")
      continue
    cores = (f", {need['cores_needed']:.1f} cores at grain's 1-core rate per CPU-second"
             if "cores_needed" in need else "")
    lines.append(f"  {label} needs {need['examples_per_s']:.0f} examples/s "
                 f"({need['source']}){cores}")
  return "\n".join(lines)


def paper_configs() -> list[str]:
  return sorted(p for paper in ("sanet", "aa", "kanet", "hamburger", "isa")
                for p in glob.glob(f"configs/{paper}/*.py") if "def get_config" in open(p).read())


def _row(r: dict) -> str:
  if "error" in r:
    return f"| {r['config']} | not measured: {r['error']} |" + " |" * 9
  f = lambda v, d=0: "—" if v is None else f"{v:,.{d}f}"  # pylint: disable=C3001
  grain, tf_data = r["rates"].get("grain", {}), r["rates"].get("tf.data", {})
  rate = lambda path, cores="1": path.get(cores, {}).get("examples_per_cpu_s")  # pylint: disable=C3001
  most = max(grain, key=int) if grain else "1"
  every = grain.get(most, {})
  ratio = (rate(grain) / rate(tf_data)) if rate(grain) and rate(tf_data) else None
  v5e, h100 = r["v5e_host"] or {}, r["h100x8_host"] or {}
  return (f"| {r['config']} | {r['dataset']} ({r['data']}) | {f(rate(grain), 1)} | "
          f"{f(rate(tf_data), 1)} | {f(ratio, 2)} | {f(every.get('examples_per_s'), 1)} "
          f"({most}) | {f(tf_data.get(most, {}).get('examples_per_s'), 1)} | "
          f"{f(v5e.get('examples_per_s'))} ({v5e.get('source', 'no aot')}) | "
          f"{f(v5e.get('cores_needed'), 1)} | {f(h100.get('examples_per_s'))} | "
          f"{f(h100.get('cores_needed'), 1)} |")


def table(results: list[dict], machine: dict) -> str:
  o = flags.FLAGS
  missing = [p for p in paper_configs() if p not in {r["config"] for r in results}]
  return "\n".join([
      "# Input-pipeline rate per paper config, Grain beside tf.data "
      "(`python -m experiments.input_throughput`)", "",
      f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['date']}, shared with "
      f"other jobs: 1-min load average {machine['load_average'][0]:.1f} at the start"
      + (f", {machine['load_after'][0]:.1f} at the end" if machine.get("load_after") else "")
      + ".", "",
      "Each row: `python -m experiments.input_throughput --configs=<config>` (its docstring "
      "states the method): the config's train stream (read, decode, augment, batch; no "
      "model) on the grain path (the task's own `train_batches`, ArrayRecord) and on the "
      "tf.data path it replaced (TFRecord), over the same records, pinned to 1 core and to "
      f"all cores (grain: one decoding worker process per core), median of {o.windows} "
      f"windows of {o.seconds:g} s after {o.warmup:g} s of warm-up, batches of "
      f"{o.batch_size} (or the config's batch where smaller); the real data where prepared, "
      f"else {o.examples} stand-in examples in its on-disk format. Ex per CPU-s (user + "
      "system time of the process and its workers) is what one dedicated core delivers; "
      "wall ex/s fall with the machine's load. Needed: what one host consumes at the `aot` "
      "roofline step time (an upper bound); cores = needed / grain's 1-core ex per CPU-s.",
      "",
      "| config | dataset (data) | grain ex per CPU-s (1 core) | tf.data ex per CPU-s (1 "
      "core) | grain / tf.data | grain ex/s (cores) | tf.data ex/s | v5e host needs ex/s "
      "(source) | cores for v5e host | 8×H100 host needs ex/s | cores for 8×H100 host |",
      "|" + "---|" * 11,
      *map(_row, results), *(f"| {p} | not measured yet |" + " |" * 9 for p in missing), ""])


def _check_flags() -> None:
  """One line `error: ...` (exit 2) naming a bad measuring flag."""
  for name, flag in (("seconds", _SECONDS), ("warmup", _WARMUP)):
    if flag.value < 0 or (name == "seconds" and flag.value == 0):
      cli.fail(f"--{name} = {flag.value}: must be positive")
  for name, flag in (("windows", _WINDOWS), ("batch_size", _BATCH), ("examples", _EXAMPLES)):
    if flag.value < 1:
      cli.fail(f"--{name} = {flag.value}: must be a positive integer")
  for count in _CORES.value:
    if count != "all" and not (count.isdigit() and 0 < int(count) <= len(available_cores())):
      cli.fail(f"--cores = {count!r}: must be 'all' or 1..{len(available_cores())}")
  for path in _PATHS.value:
    if path not in PATHS:
      cli.fail(f"--paths = {path!r}: must be among {', '.join(PATHS)}")


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]!r}")
  from experiments import measure  # pylint: disable=g-import-not-at-top
  saved_json = measure.RESULTS / "input_throughput.json"
  saved = None
  if _TABLE_ONLY.value or (_CONFIGS.value and saved_json.exists()):
    saved = json.loads(saved_json.read_text())  # a run of named configs replaces only their rows
  if not _TABLE_ONLY.value:
    _check_flags()
    machine = {"cpu": measure.machine()["cpu"], "cores": len(available_cores()),
               "date": datetime.date.today().isoformat(), "load_average": os.getloadavg()}
    fresh, saved = saved is None, saved or {"machine": machine, "results": []}
    try:
      configs = {p: cli.load_config(p, field="--configs")
                 for p in _CONFIGS.value or paper_configs()}
    except cli.ConfigError as e:
      cli.fail(str(e))
    for path, config in configs.items():
      try:
        result = run(config, path, batch_size=_BATCH.value, seconds=_SECONDS.value,
                     windows=_WINDOWS.value, warmup=_WARMUP.value, examples=_EXAMPLES.value,
                     core_counts=_CORES.value, data_root=_DATA_ROOT.value,
                     aot_dir=str(measure.RESULTS), paths=_PATHS.value)
        print(summary(result), flush=True)
      except (ValueError, RuntimeError) as e:
        result = {"config": path, "error": str(e).splitlines()[0]}
        print(f"{path}: {result['error']}", flush=True)
      if fresh:
        machine["load_after"] = os.getloadavg()
      else:  # the saved machine line is another run's
        result["measured"] = {"date": machine["date"], "load_average": os.getloadavg()}
      saved["results"] = sorted([r for r in saved["results"] if r["config"] != path] + [result],
                                key=lambda r: r["config"])
      saved_json.write_text(json.dumps(saved, indent=1))
  print(measure.write(measure.RESULTS, "input_throughput", None,
                      table(saved["results"], saved["machine"])))


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  app.run(main, flags_parser=cli.parse_flags)
