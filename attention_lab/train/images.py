"""A task's pictures (`Task.image_summaries`) as PNG files under <workdir>/images/."""

import io

import numpy as np
from etils import epath


def save_png(images: dict, workdir: str, step: int) -> None:
  """Each batch of `images` (name -> [N, H, W, C] uint8) as one PNG of its N pictures side
  by side: <workdir>/images/<name>_<step:07d>.png ('/' in a name becomes '_')."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  folder = epath.Path(workdir) / "images"
  folder.mkdir(parents=True, exist_ok=True)
  for name, batch in images.items():
    tiles = np.concatenate(list(np.asarray(batch)), axis=1)
    buffer = io.BytesIO()
    Image.fromarray(tiles.squeeze(-1) if tiles.shape[-1] == 1 else tiles).save(buffer, "PNG")
    (folder / f"{name.replace('/', '_')}_{step:07d}.png").write_bytes(buffer.getvalue())
