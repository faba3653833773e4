"""Per-example preprocessing and augmentation of every task family in numpy, without
TensorFlow: ports of the tf.data maps in data/pipeline.py (classification),
segmentation.py, detection.py, restoration.py and gan.py, for Grain.

Conventions: images arrive as TFDS stores them (uint8 (H, W, C)); random transforms
take an `np.random.Generator` (Grain's per-index random map seeds it from the seed
and the example's index), deterministic ones none; parameters are keyword
arguments; outputs are dicts of numpy arrays with the keys, dtypes and shapes of the
TF functions. Where normalisation can run once per batch, `normalize=False` leaves
pixel values and the family's normalising function (`image.normalize`,
`gan.to_signed_range`) takes the whole batch. The random draws differ from TF's
(numpy's generator, not TF's stateless Philox ops); their distributions are TF's.
"""
