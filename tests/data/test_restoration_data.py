"""Restoration data: the CARE manual_dir builder on files written here, embedded builders."""

import ml_collections
import numpy as np
import pytest
import tifffile

from attention_lab.data import restoration as data
from attention_lab.data import availability, sources
from attention_lab.data.info import data_info
from attention_lab.data.builders import care, photos, synthetic_volumes


def _config(name, tmp_path, patch, **dataset):
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.dataset = ml_collections.ConfigDict(dict(
      name=name, data_dir=str(tmp_path / "tfds"), manual_dir="", train_split="train",
      eval_split="test", patch_size=patch, augment=True, input_percentiles=(), channels=0,
      image_dir="", workers=0))
  config.dataset.update(dataset)
  return config


def _write_care(root, projection):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(5, 1, 6, 16, 16)).astype(np.float32)  # S C Z Y X, as CSBDeep writes
  y = x[:, :, :1] if projection else x + 1
  (root / "train_data").mkdir(parents=True)
  np.savez(root / "train_data" / "data_label.npz", X=x, Y=y, axes="SCZYX")
  for folder in ("GT", "condition_1", "condition_2"):
    (root / "test_data" / folder).mkdir(parents=True)
  for i in range(2):
    stack = (rng.uniform(0, 1000, (7, 20, 24))).astype(np.uint16)
    gt = stack.max(0) if projection else stack
    tifffile.imwrite(root / "test_data" / "GT" / f"s{i}.tif", gt)
    tifffile.imwrite(root / "test_data" / "condition_1" / f"s{i}.tif", stack)
    tifffile.imwrite(root / "test_data" / "condition_2" / f"s{i}.tif", stack // 2)
  return x, y


@pytest.mark.parametrize("variant", ["planaria", "flywing"])
def test_care_builder_reads_npz_and_tiffs(tmp_path, variant):
  projection = variant == "flywing"
  x, y = _write_care(tmp_path / "care", projection)
  config = _config(f"care/{variant}", tmp_path, (6, 8, 8), manual_dir=str(tmp_path / "care"),
                   eval_split="test_condition_1", input_percentiles=(1.0, 99.8))
  info = data_info(config)  # the published facts: the real data's ranks and channels
  assert (info.input_rank, info.target_rank, info.channels) == (3, 2 if projection else 3, 1)
  folder = sources.version_dir(config.dataset)  # prepared on first use from the manual_dir
  assert set(availability.find_prepared(config.dataset.name, config.dataset.data_dir).info.splits) \
      == {"train", "test_condition_1", "test_condition_2"}
  assert len(sources.Records(folder, "train")) == 5
  batch = next(data.train_iterator(config, local_batch_size=2))
  assert batch["input"].shape == (2, 6, 8, 8, 1)
  assert batch["target"].shape == ((2, 8, 8, 1) if projection else (2, 6, 8, 8, 1))
  if not projection:  # a patch of Y is the same patch of X plus one, after the same flips
    np.testing.assert_allclose(batch["target"], batch["input"] + 1, atol=1e-6)
  examples = list(data.eval_examples(config))
  assert sorted(name for *_, name in examples) == ["s0.tif", "s1.tif"]
  image, target, name = examples[0]
  raw = tifffile.imread(tmp_path / "care" / "test_data" / "condition_1" / name)
  np.testing.assert_allclose(np.percentile(image, [1, 99.8]), [0, 1], atol=1e-5)
  assert image.shape == raw.shape + (1,)
  gt = tifffile.imread(tmp_path / "care" / "test_data" / "GT" / name)
  np.testing.assert_array_equal(target[..., 0], gt)


def test_care_axes_to_channels_last():
  a = np.arange(2 * 3 * 4 * 5).reshape(2, 4, 5, 3)  # S Y X C
  np.testing.assert_array_equal(care.to_channels_last(a, "SYXC"), a)
  b = np.transpose(a, (0, 3, 1, 2))  # S C Y X
  np.testing.assert_array_equal(care.to_channels_last(b, "SCYX"), a)
  with pytest.raises(ValueError, match="axes"):
    care.to_channels_last(a, "SYX")


def test_care_needs_manual_dir(tmp_path):
  config = _config("care/tribolium", tmp_path, (8, 16, 16))
  with pytest.raises(ValueError, match=r"^dataset 'care/tribolium' is not prepared in data_dir "
                     rf"{tmp_path}/tfds and its manual_dir {tmp_path}/tfds/downloads/manual "
                     r"lacks train_data/data_label\.npz and 1 more; prepare it with: "):
    next(data.train_iterator(config, local_batch_size=2))


def test_photo_splits_are_disjoint_real_photos(tmp_path):
  assert not set(photos.TRAIN_PHOTOS) & set(photos.TEST_PHOTOS)
  config = _config("restoration_photos", tmp_path, (32, 32))
  info = data_info(config)
  assert (info.num_examples("train"), info.num_examples("test")) == (14, 3)
  examples = list(data.eval_examples(config))
  assert sorted(name for *_, name in examples) == sorted(photos.TEST_PHOTOS)
  for noisy, clean, name in examples:
    np.testing.assert_array_equal(clean[..., 0], photos.load_photo(name))
    assert 15 < 10 * np.log10(1 / np.mean((noisy - clean) ** 2)) < 22  # noisy, not destroyed
  fresh = data.train_iterator(config, local_batch_size=4)
  fourth = [next(fresh) for _ in range(4)][3]
  batch = next(data.train_iterator(config, local_batch_size=4, start_step=3))
  assert batch["input"].shape == batch["target"].shape == (4, 32, 32, 1)
  for key in ("input", "target"):  # resuming at step 3 continues the fresh stream exactly
    np.testing.assert_array_equal(batch[key], fourth[key])


def test_synthetic_generators_are_seeded():
  a = synthetic_volumes.denoising_volume(3, (8, 16, 16))
  b = synthetic_volumes.denoising_volume(3, (8, 16, 16))
  np.testing.assert_array_equal(a[0], b[0])
  assert not np.array_equal(a[0], synthetic_volumes.denoising_volume(4, (8, 16, 16))[0])
  stack, texture = synthetic_volumes.projection_stack(0, (8, 16, 20))
  assert stack.shape == (8, 16, 20) and texture.shape == (16, 20)
