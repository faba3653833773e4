"""Restoration data: (input, target) pairs, training patches, full test images.

config.dataset fields:
  name: "restoration_photos" (2D, embedded), "synthetic_volumes/denoising",
    "synthetic_volumes/projection" (3D, synthetic, embedded) or "care/planaria",
    "care/tribolium", "care/flywing" (manual_dir, see data/builders/care.py).
  data_dir: TFDS directory ("" = default); manual_dir: the CARE folder.
  train_split, eval_split: e.g. "train" / "test" (CARE: "test_condition_1").
  patch_size: the input patch (spatial) cut at a random place from every
    training example (a CARE patch of exactly that size is taken whole, as
    SAO Table 10's 16×64×64 / 50×64×64 patches are); a projection target is
    cut at the same Y, X.
  augment: random flips of every spatial axis but the first of 3D inputs
    (Y, X) and 90° rotations in (Y, X) when square (False: CARE's default).
  input_percentiles: (low, high) or None: evaluation inputs are normalised
    (x − p_low)/(p_high − p_low) before prediction, as CSBDeep's
    `PercentileNormalizer(1, 99.8)` does for CARE test stacks (the training
    patches of the CARE npz are already normalised that way).

The training stream is data/pipeline.py's (patches and flips of transforms/
restoration.py): a pure function of (seed, step), resumed in O(1), each process
reading its rows of every global batch.
"""

from __future__ import annotations

import numpy as np

from attention_lab.data import info, pipeline, sources
from attention_lab.data.transforms import restoration as transforms


def _records(config, split: str):
  info.lookup(config.dataset.name, "restoration")
  return sources.records(config.dataset, split)


def train_iterator(config, *, local_batch_size: int, start_step: int = 0):
  """Endless iterator of {"input", "target"} numpy patch batches, positioned at `start_step`."""
  d = config.dataset
  patch, augment = tuple(d.patch_size), bool(d.augment)

  def crop(example, rng):
    return transforms.train(example["input"], example["target"], rng, patch=patch,
                            augment=augment)

  return pipeline.resumable_batches(
      _records(config, d.train_split), crop, seed=config.seed,
      batch_shape=(local_batch_size,), start_step=start_step, workers=d.workers)


def eval_examples(config):
  """Every (input, target, name) of the eval split as float32 numpy (the same on every process).

  Inputs are percentile-normalised when config.dataset.input_percentiles is set.
  """
  records = _records(config, config.dataset.eval_split)
  percentiles = config.dataset.input_percentiles
  for index in range(len(records)):
    example = records[index]
    x = example["input"].astype(np.float32)
    if percentiles:
      lo, hi = np.percentile(x, percentiles)
      x = ((x - lo) / (hi - lo + 1e-20)).astype(np.float32)
    name = example.get("name", b"")
    name = name.decode() if isinstance(name, bytes) else str(name or index)
    yield x, example["target"].astype(np.float32), name or str(index)
