"""GAN input: images in [−1, 1] (RGB, side `config.dataset.image_size`) and labels.

Datasets (facts in data/info.py; TFDS builders, or the embedded ones of data/builders):
- `digits` (embedded, 32×32 grey, tiled to RGB; 10 classes);
- `cifar10` (32×32, resized when image_size differs; 10 classes);
- `celeb_a`: the heykeetae SAGAN recipe the Refined-SA paper ran: centre crop
  160×160 of the 218×178 aligned face, resized to image_size; unconditional
  (label 0). TFDS's Google-Drive download often fails its checksum, so
  `config.dataset.image_dir` may instead name the `img_align_celeba/` folder of
  JPEGs: sorted by name, the official partition (the split sizes of the facts table:
  the first 162,770 train, the next 19,867 validation, the rest test);
- `imagenet2012` (manual TFDS download): BigGAN/SAGAN's centre crop to the
  shorter side, resized to image_size (128 for Ham Table 6); 1,000 classes.
Resizes are bilinear with antialiasing (transforms/gan.py); the scaling to [−1, 1]
runs once per batch.

Training batches are {"image": (B, d_steps, S, S, 3) float32, "label": (B, d_steps) int32}:
one train step holds the real images of its `d_steps` discriminator updates, the
example axis first so that each device's shard of the batch has its share of
every D update. The stream is data/pipeline.py's: a pure function of (seed, step),
resumed in O(1).
"""

from __future__ import annotations

from collections.abc import Sequence

from etils import epath

from attention_lab.data import info, pipeline, sources
from attention_lab.data.transforms import gan as transforms


def check(config) -> info.DataInfo:
  """The facts of config.dataset (ValueError naming the GAN's datasets otherwise)."""
  return info.lookup(config.dataset.name, "gan")


def _celeba_files(image_dir: str, split: str) -> list[epath.Path]:
  """The JPEGs of `split` in the img_align_celeba folder: the official partition."""
  splits = info.FACTS["celeb_a"].splits
  if split not in splits:
    raise ValueError(f"split must be one of {sorted(splits)} with dataset.image_dir, "
                     f"got {split!r}")
  folder = epath.Path(image_dir)
  if not folder.is_dir():
    raise ValueError(f"dataset.image_dir {image_dir!r} is not a directory")
  files = sorted(f.name for f in folder.iterdir() if f.name.lower().endswith((".jpg", ".png")))
  order = ("train", "validation", "test")
  start = sum(splits[s] for s in order[:order.index(split)])
  stop = None if split == "test" else start + splits[split]
  return [folder / f for f in files[start:stop]]


def records(config, split: str) -> Sequence:
  """The examples of `split`: {"image": uint8 (H, W, C), maybe "label"}."""
  check(config)
  d = config.dataset
  if d.name == "celeb_a" and d.image_dir:
    return sources.ImageFiles(_celeba_files(d.image_dir, split))
  return sources.records(d, split)


def preprocess(config, example) -> dict:
  """A raw example → {"image": uint8 (S, S, 3), "label": int32} (no augmentation)."""
  return transforms.preprocess(example["image"], example.get("label", 0),
                               dataset=config.dataset.name, size=config.dataset.image_size,
                               normalize=False)


def _signed(batch):
  return {**batch, "image": transforms.to_signed_range(batch["image"])}


def train_iterator(config, *, local_batch_size: int, d_steps: int, start_step: int = 0):
  """Endless numpy batches {"image": (B, d_steps, S, S, 3), "label": (B, d_steps)} for this
  process, positioned at `start_step`."""
  return pipeline.resumable_batches(
      records(config, config.dataset.train_split), lambda ex, _: preprocess(config, ex),
      seed=config.seed, batch_shape=(local_batch_size, d_steps), start_step=start_step,
      workers=config.dataset.workers, batch_map=_signed)


def real_images(config, split: str, *, limit: int, batch_size: int = 256):
  """The first `limit` images of `split` (every process reads the same ones), as numpy
  batches {"image": float32 (b, S, S, 3) in [−1, 1], "label": (b,)}: the real side of FID."""
  return pipeline.in_order(records(config, split), lambda ex: preprocess(config, ex),
                           batch_size=batch_size, limit=limit or None, batch_map=_signed,
                           workers=config.dataset.workers)
