"""`digit_scenes`: canvases of scikit-learn's real digits with masks and boxes (TFDS).

The CPU-sized dataset for the dense tasks (segmentation, detection): each scene
is an RGB 64×64 canvas holding 1-4 real handwritten digits from
`sklearn.datasets.load_digits`, so building needs no network.

A scene (all randomness from `numpy.random.default_rng([SEED, split, index])`,
so every build gives the same bytes and scenes do not depend on build order):
- background: a dark colour (each channel in [0, 50]) plus a linear gradient
  in a random direction (amplitude up to 40 per channel) plus Gaussian noise
  (σ = 4), clipped to uint8;
- n ~ U{1..4} digits, each drawn uniformly with replacement from the split's
  pool, its 8×8 image (0..16 rescaled to 0..255, as in `digits`) upsampled
  bilinearly (PIL) to s×s, s ~ U{14..30}, painted in a random bright colour
  (HSV: hue uniform, saturation in [0.5, 1], value in [0.7, 1]; colour is
  independent of the class) by alpha blending with alpha = intensity / 255;
  later digits are painted over (occlude) earlier ones;
- foreground of a digit: its upsampled intensity ≥ `FOREGROUND_THRESHOLD`
  (102, i.e. 40 % of full scale);
- placement: a uniformly random position with the s×s patch inside the
  canvas, rejected (up to `MAX_TRIES` times, then the digit is dropped; the
  first digit always fits) unless, against every digit already placed, the
  tight boxes of the foregrounds have IoU < `MAX_IOU` (0.3) and intersection
  / smaller box area < 0.5, and every earlier digit keeps at least half of
  its foreground pixels visible.

Features:
- `image`: (64, 64, 3) uint8.
- `mask`: (64, 64, 1) uint8; 0 background, k + 1 on the visible foreground
  pixels of a digit of class k (so 1..10).
- `objects` (a Sequence, one entry per digit, in painting order):
  `bbox` tfds BBox (ymin, xmin, ymax, xmax) normalised to [0, 1], the tight
  box of the digit's VISIBLE mask pixels, pixel edges (row r0..r1 gives
  ymin = r0 / 64, ymax = (r1 + 1) / 64; COCO's convention); `label`
  ClassLabel(10); `area` int64, the number of visible mask pixels (COCO
  small / medium / large use it); `index` int64, the digit's index in
  `load_digits()` (provenance; lets tests prove the splits share no digit).

Splits: `train` 4,000 scenes from the 1,497 digits of the `digits` builder's
train split only; `test` 500 scenes from its 300 test digits only (the same
seed-0 permutation, imported from `digits`), so no handwritten digit appears
in both. Building takes a few seconds.
"""

import colorsys
import io

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

from attention_lab.data.builders import digits as digits_builder

SIZE = 64
NUM_CLASSES = 10  # Digit classes; the mask has NUM_CLASSES + 1 values (0 = background).
NUM_TRAIN = 4000
NUM_TEST = 500
MIN_DIGITS, MAX_DIGITS = 1, 4
MIN_DIGIT_SIZE, MAX_DIGIT_SIZE = 14, 30
FOREGROUND_THRESHOLD = 102
MAX_IOU = 0.3
MAX_OVERLAP_OF_SMALLER = 0.5
MIN_VISIBLE_FRACTION = 0.5
MAX_TRIES = 50
SEED = 20261123
_SPLIT_IDS = {"train": 0, "test": 1}


def digit_pools():
  """{'train' | 'test': (images (n, 8, 8) uint8 0..255, labels (n,), load_digits indices (n,))}.

  The split of the `digits` builder: its seed-0 permutation, the last
  `digits.NUM_TEST` images for test, the rest for train.
  """
  images, labels, order = digits_builder._examples()  # pylint: disable=protected-access
  num_train = len(images) - digits_builder.NUM_TEST
  return {"train": (images[:num_train], labels[:num_train], order[:num_train]),
          "test": (images[num_train:], labels[num_train:], order[num_train:])}


def _box_iou_and_overlap(a, b):
  """IoU and intersection / smaller area of two (y0, x0, y1, x1) pixel-edge boxes."""
  ih = max(0, min(a[2], b[2]) - max(a[0], b[0]))
  iw = max(0, min(a[3], b[3]) - max(a[1], b[1]))
  inter = ih * iw
  area_a = (a[2] - a[0]) * (a[3] - a[1])
  area_b = (b[2] - b[0]) * (b[3] - b[1])
  return inter / (area_a + area_b - inter), inter / min(area_a, area_b)


def _background(rng):
  base = rng.uniform(0, 50, size=3)
  amplitude = rng.uniform(0, 40, size=3)
  angle = rng.uniform(0, 2 * np.pi)
  yy, xx = np.mgrid[0:SIZE, 0:SIZE] / (SIZE - 1)
  ramp = np.cos(angle) * yy + np.sin(angle) * xx
  ramp = (ramp - ramp.min()) / (ramp.max() - ramp.min())
  noise = rng.normal(0, 4, size=(SIZE, SIZE, 3))
  return base + ramp[..., None] * amplitude + noise


def render_scene(rng, images, labels, indices):
  """One scene from a digit pool; returns (image, mask, objects dict of arrays).

  `images` (n, 8, 8) uint8, `labels` (n,), `indices` (n,) as from
  `digit_pools()`. Time O(digits · tries · SIZE²).
  """
  canvas = _background(rng)
  instance = np.full((SIZE, SIZE), -1, np.int64)  # Which placed digit owns each pixel.
  full_counts, boxes, chosen = [], [], []
  for _ in range(rng.integers(MIN_DIGITS, MAX_DIGITS + 1)):
    pick = int(rng.integers(len(images)))
    s = int(rng.integers(MIN_DIGIT_SIZE, MAX_DIGIT_SIZE + 1))
    patch = np.asarray(Image.fromarray(images[pick]).resize((s, s), Image.BILINEAR))
    fg = patch >= FOREGROUND_THRESHOLD
    rows, cols = np.nonzero(fg)
    if rows.size == 0:
      continue
    for _ in range(MAX_TRIES):
      y, x = (int(v) for v in rng.integers(0, SIZE - s + 1, size=2))
      box = (y + rows.min(), x + cols.min(), y + rows.max() + 1, x + cols.max() + 1)
      if any(iou >= MAX_IOU or over >= MAX_OVERLAP_OF_SMALLER
             for iou, over in (_box_iou_and_overlap(box, b) for b in boxes)):
        continue
      trial = instance.copy()
      trial[y:y + s, x:x + s][fg] = len(boxes)
      if all(np.count_nonzero(trial == j) >= MIN_VISIBLE_FRACTION * n
             for j, n in enumerate(full_counts)):
        break
    else:
      continue  # No admissible place: drop this digit.
    hue, sat, val = rng.uniform(0, 1), rng.uniform(0.5, 1), rng.uniform(0.7, 1)
    colour = 255.0 * np.array(colorsys.hsv_to_rgb(hue, sat, val))
    alpha = patch[..., None] / 255.0
    region = canvas[y:y + s, x:x + s]
    canvas[y:y + s, x:x + s] = region * (1 - alpha) + colour * alpha
    instance = trial
    full_counts.append(int(fg.sum()))
    boxes.append(box)
    chosen.append(pick)

  mask = np.zeros((SIZE, SIZE), np.uint8)
  bboxes, areas = [], []
  for j, pick in enumerate(chosen):
    visible = instance == j
    mask[visible] = labels[pick] + 1
    rows, cols = np.nonzero(visible)
    bboxes.append([rows.min() / SIZE, cols.min() / SIZE,
                   (rows.max() + 1) / SIZE, (cols.max() + 1) / SIZE])
    areas.append(rows.size)
  image = np.clip(np.round(canvas), 0, 255).astype(np.uint8)
  objects = {
      "bbox": np.asarray(bboxes, np.float32).reshape(-1, 4),
      "label": np.asarray([labels[p] for p in chosen], np.int64),
      "area": np.asarray(areas, np.int64),
      "index": np.asarray([indices[p] for p in chosen], np.int64),
  }
  return image, mask[..., None], objects


def scene(split, index, pools=None):
  """Scene `index` of `split` ('train' | 'test'), exactly as the builder writes it."""
  pools = pools or digit_pools()
  rng = np.random.default_rng([SEED, _SPLIT_IDS[split], index])
  return render_scene(rng, *pools[split])


def _png(array):
  buffer = io.BytesIO()
  Image.fromarray(array).save(buffer, format="png")
  return buffer.getvalue()


class DigitScenes(tfds.core.GeneratorBasedBuilder):
  """Embedded 64×64 RGB scenes of 1-4 real digits: masks (0, 1..10), boxes, labels."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "4000/500 scenes of load_digits digits, 64×64, IoU < 0.3."}

  def _info(self):
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(SIZE, SIZE, 3)),
            "mask": tfds.features.Image(shape=(SIZE, SIZE, 1)),
            "objects": tfds.features.Sequence({
                "bbox": tfds.features.BBoxFeature(),
                "label": tfds.features.ClassLabel(num_classes=NUM_CLASSES),
                "area": np.int64,
                "index": np.int64,
            }),
        }),
        homepage="https://scikit-learn.org/stable/datasets/toy_dataset.html#digits-dataset",
        disable_shuffling=True,  # Record i is scene i (`scene(split, i)`); pipelines shuffle.
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    return {"train": self._generate_examples("train", NUM_TRAIN),
            "test": self._generate_examples("test", NUM_TEST)}

  def _generate_examples(self, split, count):
    pools = digit_pools()
    for i in range(count):
      image, mask, objects = scene(split, i, pools)
      # PNG-encoded here with PIL (lossless, 10x faster than TFDS's TF-graph encoder).
      yield i, {"image": _png(image), "mask": _png(mask[..., 0]), "objects": objects}
