"""The files benchmark servers and external tools take (`Task.export`, `predict`): VOC
and PASCAL-Context palette PNGs, ADE20K and Cityscapes greyscale label maps, COCO results
JSON. Paths are epath."""

import io
import re

import jax
import numpy as np
from etils import epath
from jax.experimental import multihost_utils

# COCO's 80 category ids in the order of its (and TFDS coco/2017's) contiguous labels.
COCO_CATEGORY_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                     23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
                     46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64,
                     65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88,
                     89, 90)
COCO_RESULT_SETS = {"test": "test-dev2017", "validation": "val2017"}


def voc_colour_map() -> np.ndarray:
  """The PASCAL VOC colour map (bit-interleaved class index), (256, 3) uint8."""
  colours = np.zeros((256, 3), np.uint8)
  for k in range(256):
    c, r, g, b = k, 0, 0, 0
    for j in range(8):
      r |= ((c >> 0) & 1) << (7 - j)
      g |= ((c >> 1) & 1) << (7 - j)
      b |= ((c >> 2) & 1) << (7 - j)
      c >>= 3
    colours[k] = (r, g, b)
  return colours


def host(x) -> np.ndarray:
  """A global array as numpy on every process: replicated → this process's copy; sharded
  over processes → all-gathered (multi-host safe; np.asarray alone is not)."""
  if not isinstance(x, jax.Array) or x.is_fully_addressable:
    return np.asarray(x)
  if x.sharding.is_fully_replicated:
    return np.asarray(x.addressable_data(0))
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def text(value) -> str:
  return value.decode() if isinstance(value, bytes) else str(value)


def save_png(image, path: epath.Path) -> None:
  buffer = io.BytesIO()
  image.save(buffer, "PNG")
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(buffer.getvalue())


def palette_png(labels: np.ndarray, path: str, *, palette: bool = True) -> None:
  """uint8 class indices (H, W) → an indexed PNG with the VOC colour map (mode P), or a
  greyscale one (mode L)."""
  from PIL import Image
  image = Image.fromarray(np.asarray(labels, np.uint8), mode="L")
  if palette:
    image = image.convert("P")
    image.putpalette(voc_colour_map().reshape(-1).tolist())
  save_png(image, epath.Path(path))


def segmentation_layout(dataset_name: str):
  """(folder under --out, class index → stored value (uint8 array), palette?) per dataset."""
  from attention_lab.data import segmentation as seg_data
  if dataset_name == "voc_segmentation":
    return "results/VOC2012/Segmentation/comp6_test_cls", \
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


def result_set(split: str) -> str:
  """The <testset> of COCO's results file name: test-dev2017 for the whole `test` split,
  val2017 for `validation`, else the split with its slice made file-safe."""
  return COCO_RESULT_SETS.get(split) or re.sub(r"[^\w.-]+", "-", split).strip("-")
