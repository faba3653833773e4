"""Stand-in datasets in the real on-disk formats, for measuring an input pipeline here.

When a config's dataset is not prepared on this host, `write(config, root, n)` writes
`n` examples in that dataset's real format and returns the config overrides that make
the config's own pipeline read them, exactly as it would read the real data:

- TFDS datasets (`imagenet2012`, `cifar10`, `cifar100`, `coco/2017`): a prepared TFDS
  directory under `root/tfds`, written by a subclass of the registered builder whose
  only change is where the examples come from, so the features (JPEG / PNG encoding,
  labels, boxes) are the builder's own. The recorded split size is scaled to the real
  split's example count: TFDS caches *decoded* datasets under 250 MiB in memory
  (`DatasetBuilder._should_cache_ds`; data/sources.py's `Records` likewise), and the
  stand-in must be cached exactly when the real dataset would be (CIFAR: yes; ImageNet,
  COCO: no). experiments/input_throughput.py scales the manual-download stand-ins the
  same way once they are prepared (`claim_real_size`).
- Manual-download datasets (`voc_segmentation`, `pascal_context`, `ade20k_challenge`,
  `care/*`): their manual_dir layout (VOCdevkit with palette PNG masks; VOC2010 with
  PASCAL-Context's grey label PNGs; ADEChallengeData2016 with grey PNG annotations; CARE's train_data/data_label.npz and test_data TIFFs), prepared by
  our builders on first use.
- `celeb_a`: a folder of aligned 178×218 JPEGs, read through `dataset.image_dir`.

Images are crops of the colour photographs bundled with scikit-image, resized to the
dataset's typical size (ImageNet ~400×350, COCO ~640×480, VOC and PASCAL-Context 500×375, ADE20K
512×683 or 683×512, CelebA 178×218, CIFAR 32×32), so JPEG sizes and decode times are
those of photographs, not of noise.
"""

import os

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

# The TFDS catalogue datasets written here with their registered builders.
TFDS_NAMES = ("cifar10", "cifar100", "coco/2017", "imagenet2012")
# (height, width) of typical images, jittered by ±10% per example where `jitter`.
SIZES = {"imagenet2012": (350, 400), "coco/2017": (480, 640), "voc_segmentation": (375, 500),
         "pascal_context": (375, 500),
         "ade20k_challenge": (512, 683), "celeb_a": (218, 178), "cifar10": (32, 32),
         "cifar100": (32, 32)}
CARE_PATCHES = {"care/planaria": ((16, 64, 64), (16, 64, 64)),
                "care/tribolium": ((16, 64, 64), (16, 64, 64)),
                "care/flywing": ((50, 64, 64), (1, 64, 64))}  # (input ZYX, target ZYX)
NAMES = tuple(sorted({*SIZES, *CARE_PATCHES}))


def _photos() -> list[np.ndarray]:
  from skimage import data  # pylint: disable=g-import-not-at-top
  return [getattr(data, name)() for name in ("astronaut", "coffee", "chelsea", "rocket")]


class PhotoSampler:
  """Seeded random crops of real photographs, resized to a requested size (uint8 RGB)."""

  def __init__(self, seed: int = 0):
    self.rng = np.random.default_rng(seed)
    self.photos = _photos()

  def __call__(self, height: int, width: int, jitter: bool = True) -> np.ndarray:
    if jitter:
      height = int(height * self.rng.uniform(0.9, 1.1))
      width = int(width * self.rng.uniform(0.9, 1.1))
    photo = self.photos[self.rng.integers(len(self.photos))]
    h, w = photo.shape[:2]
    scale = self.rng.uniform(0.5, 1.0)  # crop of 50-100% of the photo, aspect of the target
    ch = min(h, int(scale * min(h, w * height / width)))
    cw = min(w, int(ch * width / height))
    y, x = self.rng.integers(h - ch + 1), self.rng.integers(w - cw + 1)
    crop = Image.fromarray(photo[y:y + ch, x:x + cw]).resize((width, height), Image.BILINEAR)
    image = np.asarray(crop)
    return image[:, ::-1] if self.rng.random() < 0.5 else image


def _jpeg(image: np.ndarray, path: str, quality: int = 90) -> None:
  Image.fromarray(image).save(path, format="JPEG", quality=quality)


def _blocky_mask(rng, height: int, width: int, classes: list[int], border: int | None):
  """A mask of a few rectangles of random classes on background 0, optionally with
  `border`-valued outlines (VOC's void borders)."""
  mask = np.zeros((height, width), np.uint8)
  for _ in range(int(rng.integers(1, 4))):
    y0, x0 = rng.integers(height // 2), rng.integers(width // 2)
    y1, x1 = y0 + rng.integers(height // 4, height // 2), x0 + rng.integers(width // 4, width // 2)
    mask[y0:y1, x0:x1] = rng.choice(classes)
    if border is not None:
      mask[y0:y1, [x0, min(x1, width) - 1]] = border
      mask[[y0, min(y1, height) - 1], x0:x1] = border
  return mask


# TFDS builders -------------------------------------------------------------------------------

def _tfds_example(name: str, i: int, sample: PhotoSampler, rng) -> dict:
  image = sample(*SIZES[name], jitter=name not in ("cifar10", "cifar100"))
  if name == "imagenet2012":
    return {"image": image, "label": i % 1000, "file_name": f"n{i:08d}_{i}.JPEG"}
  if name == "cifar10":
    return {"image": image, "label": i % 10, "id": f"train_{i:05d}"}
  if name == "cifar100":
    return {"image": image, "label": i % 100, "coarse_label": i % 20, "id": f"train_{i:05d}"}
  if name == "coco/2017":
    boxes = []
    for _ in range(int(rng.integers(1, 12))):  # COCO averages ~7 objects an image
      y0, x0 = rng.uniform(0, 0.7, 2)
      boxes.append([y0, x0, y0 + rng.uniform(0.1, 0.3), x0 + rng.uniform(0.1, 0.3)])
    h, w = image.shape[:2]
    return {"image": image, "image/filename": f"{i:012d}.jpg", "image/id": i,
            "objects": {"area": [int((b[2] - b[0]) * (b[3] - b[1]) * h * w) for b in boxes],
                        "bbox": np.asarray(boxes, np.float32), "id": list(range(len(boxes))),
                        "is_crowd": [False] * len(boxes),
                        "label": [int(v) for v in rng.integers(0, 80, len(boxes))]}}
  raise ValueError(f"name must be one of {TFDS_NAMES}, got {name!r}")


def write_tfds(name: str, data_dir: str, num_examples: int, *, seed: int = 0,
               splits: tuple[str, ...] = ("train",)) -> tfds.core.DatasetBuilder:
  """A prepared TFDS `name` under `data_dir`: `num_examples` photo examples in the first of
  `splits`, 2 in the others, written with the registered builder's own features; returns the reading builder."""
  registered = tfds.builder(name, data_dir=data_dir)
  if registered.is_prepared():
    return registered
  sample, rng = PhotoSampler(seed), np.random.default_rng(seed)

  def split_generators(self, dl_manager):
    del self, dl_manager
    return {split: ((f"{split}_{i}", _tfds_example(name, i, sample, rng))
                    for i in range(num_examples if k == 0 else 2))  # eval splits: 2
            for k, split in enumerate(splits)}

  stand_in = type(type(registered).__name__, (type(registered),),
                  {"_split_generators": split_generators, "name": registered.name},
                  skip_registration=True)
  config = registered.builder_config.name if registered.builder_config else None
  stand_in(data_dir=data_dir, **({"config": config} if config else {})).download_and_prepare(
      download_config=tfds.download.DownloadConfig(verify_ssl=False))
  from attention_lab.data import info  # pylint: disable=g-import-not-at-top
  claim_real_size(registered.data_dir, num_examples, info.FACTS[name].splits["train"])
  return tfds.builder(name, data_dir=data_dir)


def claim_real_size(version_dir: str, num_examples: int, real_examples: int) -> None:
  """Scales the recorded split bytes of a stand-in of `num_examples` training examples by
  real_examples / num_examples, so that the stand-in is cached in memory exactly when the
  real dataset would be (TFDS's as_dataset and data/sources.py decide by the recorded
  size)."""
  import json  # pylint: disable=g-import-not-at-top
  path = os.path.join(version_dir, "dataset_info.json")
  with open(path) as f:
    record = json.load(f)
  for split in record.get("splits", []):
    split["numBytes"] = str(int(split.get("numBytes", 0)) * real_examples // num_examples)
  with open(path, "w") as f:
    json.dump(record, f, indent=1)


# Manual-download layouts ---------------------------------------------------------------------

def write_imagenet_like_jpegs(folder: str, num_examples: int, size: tuple[int, int], *,
                              seed: int = 0, prefix: str = "") -> list[str]:
  """`num_examples` photo JPEGs of about `size` (height, width) in `folder`; their paths."""
  os.makedirs(folder, exist_ok=True)
  sample, paths = PhotoSampler(seed), []
  for i in range(num_examples):
    paths.append(os.path.join(folder, f"{prefix}{i:06d}.jpg"))
    _jpeg(sample(*size, jitter=size != SIZES["celeb_a"]), paths[-1])
  return paths


def write_voc(manual_dir: str, num_examples: int, *, seed: int = 0) -> None:
  """VOCdevkit/VOC2012 with JPEGs, palette masks (0-20, 255 borders) and the split lists;
  every other id also has an SBD SegmentationClassAug grey mask (train_aug)."""
  root = os.path.join(manual_dir, "VOCdevkit", "VOC2012")
  ids = [f"2007_{i:06d}" for i in range(num_examples + 2)]
  sample, rng = PhotoSampler(seed), np.random.default_rng(seed)
  palette = np.random.default_rng(1).integers(0, 256, 768, dtype=np.uint8).tolist()
  for sub in ("JPEGImages", "SegmentationClass", "SegmentationClassAug",
              os.path.join("ImageSets", "Segmentation")):
    os.makedirs(os.path.join(root, sub), exist_ok=True)
  for k, image_id in enumerate(ids):
    image = sample(*SIZES["voc_segmentation"], jitter=False)
    _jpeg(image, os.path.join(root, "JPEGImages", f"{image_id}.jpg"))
    mask = _blocky_mask(rng, *image.shape[:2], list(range(1, 21)), border=255)
    png = Image.fromarray(mask, mode="P")
    png.putpalette(palette)
    png.save(os.path.join(root, "SegmentationClass", f"{image_id}.png"))
    if k % 2:
      Image.fromarray(mask, mode="L").save(
          os.path.join(root, "SegmentationClassAug", f"{image_id}.png"))
  sets = os.path.join(root, "ImageSets", "Segmentation")
  with open(os.path.join(sets, "train.txt"), "w") as f:
    f.write("\n".join(ids[:-2]) + "\n")
  with open(os.path.join(sets, "val.txt"), "w") as f:
    f.write("\n".join(ids[-2:]) + "\n")


def write_pascal_context(manual_dir: str, num_examples: int, *, seed: int = 0) -> None:
  """VOCdevkit/VOC2010 with JPEGs, SegmentationClassContext grey PNGs (0 background,
  1-59) and the SegmentationContext split lists, as mmseg's converter writes them."""
  from attention_lab.data.builders import pascal_context  # pylint: disable=g-import-not-at-top
  layout = pascal_context.LAYOUT
  root = os.path.join(manual_dir, layout.root)
  ids = [f"2008_{i:06d}" for i in range(num_examples + 2)]
  sample, rng = PhotoSampler(seed), np.random.default_rng(seed)
  for sub in (layout.images, layout.labels, layout.lists):
    os.makedirs(os.path.join(root, sub), exist_ok=True)
  for image_id in ids:
    image = sample(*SIZES["pascal_context"], jitter=False)
    _jpeg(image, os.path.join(root, layout.images, f"{image_id}.jpg"))
    mask = _blocky_mask(rng, *image.shape[:2], list(range(1, 60)), border=None)
    Image.fromarray(mask, mode="L").save(os.path.join(root, layout.labels, f"{image_id}.png"))
  for split, split_ids in (("train", ids[:-2]), ("val", ids[-2:])):
    with open(os.path.join(manual_dir, layout.list_path(split)), "w") as f:
      f.write("\n".join(split_ids) + "\n")


def write_ade20k(manual_dir: str, num_examples: int, *, seed: int = 0) -> None:
  """ADEChallengeData2016 images/ and annotations/ (grey PNGs, 0 = other, 1-150)."""
  root = os.path.join(manual_dir, "ADEChallengeData2016")
  sample, rng = PhotoSampler(seed), np.random.default_rng(seed)
  for folder, count, tag in (("training", num_examples, "train"), ("validation", 2, "val")):
    for sub in ("images", "annotations"):
      os.makedirs(os.path.join(root, sub, folder), exist_ok=True)
    for i in range(count):
      size = SIZES["ade20k_challenge"][::1 if i % 2 else -1]  # portrait and landscape
      image = sample(*size, jitter=False)
      _jpeg(image, os.path.join(root, "images", folder, f"ADE_{tag}_{i:08d}.jpg"))
      mask = _blocky_mask(rng, *image.shape[:2], list(range(1, 151)), border=None)
      Image.fromarray(mask, mode="L").save(
          os.path.join(root, "annotations", folder, f"ADE_{tag}_{i:08d}.png"))


def write_care(manual_dir: str, name: str, num_examples: int, *, seed: int = 0) -> None:
  """CARE's train_data/data_label.npz (X, Y, axes "SCZYX") and one test_data condition."""
  import tifffile  # pylint: disable=g-import-not-at-top
  if name not in CARE_PATCHES:
    raise ValueError(f"name must be one of {sorted(CARE_PATCHES)}, got {name!r}")
  rng = np.random.default_rng(seed)
  (x_shape, y_shape) = CARE_PATCHES[name]
  y = rng.gamma(2.0, 50.0, (num_examples, 1, *y_shape)).astype(np.float32)
  x = (rng.poisson(np.broadcast_to(y, (num_examples, 1, *x_shape)) if y_shape == x_shape
                   else rng.gamma(2.0, 50.0, (num_examples, 1, *x_shape)))).astype(np.float32)
  os.makedirs(os.path.join(manual_dir, "train_data"), exist_ok=True)
  np.savez(os.path.join(manual_dir, "train_data", "data_label.npz"), X=x, Y=y, axes="SCZYX")
  stack = rng.gamma(2.0, 50.0, (x_shape[0], 96, 96)).astype(np.float32)
  ground_truth = stack if y_shape == x_shape else stack[0]  # projection: a 2D target
  for condition, array in (("GT", ground_truth), ("condition_1", stack)):
    os.makedirs(os.path.join(manual_dir, "test_data", condition), exist_ok=True)
    tifffile.imwrite(os.path.join(manual_dir, "test_data", condition, "stack.tif"), array)


# Entry point ---------------------------------------------------------------------------------

def write(config, root: str, num_examples: int, *, seed: int = 0) -> dict[str, str]:
  """Stand-in files for config.dataset under `root`; returns the dataset overrides
  ({field: value} of config.dataset) that make the config read them."""
  name = config.dataset.name
  data_dir = os.path.join(root, "tfds")
  splits = (config.dataset.get("train_split", "train"), config.dataset.get("eval_split", "test"))
  if name in TFDS_NAMES:
    write_tfds(name, data_dir, num_examples, seed=seed, splits=tuple(dict.fromkeys(splits)))
    return {"data_dir": data_dir}
  manual_dir = os.path.join(root, "manual", name.replace("/", "_"))
  if name == "celeb_a":
    folder = os.path.join(manual_dir, "img_align_celeba")
    if not os.path.isdir(folder):
      write_imagenet_like_jpegs(folder, num_examples, SIZES["celeb_a"], seed=seed)
    return {"image_dir": folder}
  writers = {"voc_segmentation": write_voc, "pascal_context": write_pascal_context,
             "ade20k_challenge": write_ade20k}
  if not os.path.isdir(manual_dir):
    if name in writers:
      writers[name](manual_dir, num_examples, seed=seed)
    elif name in CARE_PATCHES:
      write_care(manual_dir, name, num_examples, seed=seed)
    else:
      raise ValueError(f"dataset.name must be one of {NAMES} to write stand-in files, "
                       f"got {name!r}")
  return {"data_dir": data_dir, "manual_dir": manual_dir}
