"""A task's pictures (`Task.image_summaries`) as PNG files under <workdir>/images/."""

import os

import numpy as np


def save_png(images: dict, workdir: str, step: int) -> None:
  """Each batch of `images` (name -> [N, H, W, C] uint8) as one PNG of its N pictures side
  by side: <workdir>/images/<name>_<step:07d>.png ('/' in a name becomes '_')."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  folder = os.path.join(workdir, "images")
  os.makedirs(folder, exist_ok=True)
  for name, batch in images.items():
    tiles = np.concatenate(list(np.asarray(batch)), axis=1)
    Image.fromarray(tiles.squeeze(-1) if tiles.shape[-1] == 1 else tiles).save(
        os.path.join(folder, f"{name.replace('/', '_')}_{step:07d}.png"))
