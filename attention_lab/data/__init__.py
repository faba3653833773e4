"""Input pipelines on TFDS, and builders for embedded datasets."""
