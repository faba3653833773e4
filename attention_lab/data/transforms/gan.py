"""GAN preprocessing in numpy (the port of data/gan.py's `preprocess`): real images in [−1, 1].

celeb_a: the centre 160×160 (at most the shorter side) of the aligned face, resized
to `size`; imagenet2012: the centre square of the shorter side, resized to `size`;
others (digits, cifar10): resized only when stored at another size. Resizes are
bilinear with antialiasing (Pillow on uint8, within one level of TF's). Grey is tiled
to RGB. No augmentation, no randomness.
"""

from __future__ import annotations

import numpy as np

from attention_lab.data.transforms import image as image_ops

CELEBA_CROP = 160


def to_signed_range(images: np.ndarray) -> np.ndarray:
  """uint8 pixels → float32 in [−1, 1] (pixel/127.5 − 1): one image or a whole batch."""
  out = np.multiply(images, np.float32(1 / 127.5), dtype=np.float32)
  out -= np.float32(1.0)
  return out


def preprocess(image: np.ndarray, label=0, *, dataset: str, size: int, normalize: bool = True
               ) -> dict[str, np.ndarray]:
  """`image` uint8 (H, W, 1 or 3) as stored → {"image": (size, size, 3) float32 in [−1, 1]
  (uint8 pixels with normalize=False, for `to_signed_range` over the whole batch),
  "label": int32 ()}."""
  height, width = image.shape[:2]
  side = {"celeb_a": min(height, width, CELEBA_CROP),
          "imagenet2012": min(height, width)}.get(dataset)
  if side is not None:
    top, left = (height - side) // 2, (width - side) // 2
    image = image[top:top + side, left:left + side]
  if image.shape[:2] != (size, size):
    image = image_ops.antialiased(image, (size, size))
  if image.shape[-1] == 1:
    image = np.repeat(image, 3, axis=-1)
  return {"image": to_signed_range(image) if normalize else image,
          "label": np.asarray(label, np.int32)}
