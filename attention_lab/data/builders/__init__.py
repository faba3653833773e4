"""TFDS builders for datasets embedded in pip packages (no download)."""
