"""etils.epath's file operations on one root (a gs:// URL in the tests), as the project uses
them; run as `python -m tests.gcs.epath_checks ROOT` it prints which backend served them."""

import json
import sys

from etils import epath

PAYLOAD = bytes(range(256)) * 300  # 75 KiB


def check(root: str) -> str:
  """mkdir, write, read, glob, is_dir, rename of a file and of a folder, open(); returns
  the name of epath's backend for `root`."""
  root = epath.Path(root)
  (root / "a" / "b").mkdir(parents=True, exist_ok=True)
  (root / "a" / "b" / "x.json").write_text(json.dumps({"step": 3}))
  (root / "a" / "y.bin").write_bytes(PAYLOAD)
  assert json.loads((root / "a" / "b" / "x.json").read_text()) == {"step": 3}
  assert (root / "a" / "y.bin").read_bytes() == PAYLOAD
  assert sorted(p.name for p in root.glob("a/*")) == ["b", "y.bin"]
  assert (root / "a" / "b").is_dir() and not (root / "a" / "y.bin").is_dir()
  (root / "a" / "y.bin").rename(root / "a" / "z.bin")
  assert not (root / "a" / "y.bin").exists() and (root / "a" / "z.bin").exists()
  (root / "a" / "b").rename(root / "c")  # a folder: every object under it
  assert (root / "c" / "x.json").exists() and not (root / "a" / "b").exists()
  with (root / "w.txt").open("w") as f:
    f.write("written through open()")
  return type(root._backend).__name__  # pylint: disable=protected-access


if __name__ == "__main__":
  backend = check(sys.argv[1])
  print(json.dumps({"backend": backend, "tensorflow": "tensorflow" in sys.modules}))
