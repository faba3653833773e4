"""experiments.input_throughput: rates of both paths, stand-in files in both formats read by
the config's pipelines, needs."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from attention_lab import cli
from experiments import input_throughput as throughput
from experiments import stand_in_files
from attention_lab.data import sources


def _config(spec, **dataset):
  config = cli.load_config(spec)
  for key, value in dataset.items():
    config.dataset[key] = value
  return config


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """The tiny default config on digits generated in both formats."""
  root = tmp_path_factory.mktemp("data")
  config, source = throughput.with_data(
      _config("configs/default.py:tiny", data_dir=str(root / "absent")), str(root), 8)
  assert source == "embedded" and throughput.real_data_prepared(config)
  return config


@pytest.mark.parametrize("path", throughput.PATHS)
def test_tiny_config_rates_are_positive(tiny, path):
  result = throughput.measure_in_process(tiny, batch_size=8, seconds=0.2, windows=3,
                                         warmup=0.1, path=path)
  assert result["examples_per_s"] > 0 and len(result["window_rates"]) == 3
  assert result["examples_per_s"] == sorted(result["window_rates"])[1]
  # Examples per CPU-second of the process (all its threads): the median window too.
  assert result["examples_per_cpu_s"] == sorted(result["window_cpu_rates"])[1] > 0
  assert result["batch_shapes"] == {"image": [8, 32, 32, 1], "label": [8]}
  assert result["examples_per_batch"] == 8


def test_one_core_measurement_runs_pinned_to_one_core(tiny):
  core = throughput.available_cores()[0]
  result = throughput.measure_on_cores(tiny, [core], batch_size=8, seconds=0.2, windows=1,
                                       warmup=0.1)
  assert result["affinity"] == [core] and result["cores"] == 1 and result["workers"] == 0
  assert result["examples_per_s"] > 0


def test_imagenet_stand_in_is_read_by_both_paths(tmp_path):
  builder = stand_in_files.write_tfds("imagenet2012", str(tmp_path), 4,
                                      splits=("train", "validation"))
  assert builder.is_prepared() and builder.info.splits["train"].num_examples == 4
  # Photo JPEGs of about 400×350, stored JPEG-encoded (the builder's own feature).
  assert builder.info.features["image"].encoding_format == "jpeg"
  for example in tfds.as_numpy(builder.as_dataset(split="train")):
    assert 315 <= example["image"].shape[0] <= 385 and 360 <= example["image"].shape[1] <= 440
    assert example["image"].std() > 20  # a photograph, not a flat image
  # Claims the real split's size, so TFDS does not cache the decoded images in memory.
  assert builder.info.dataset_size > 250 * 2**20
  config = _config("configs/sanet/imagenet.py", data_dir=str(tmp_path))
  assert not throughput.real_data_prepared(config)  # TFRecord only
  throughput.both_formats(config.dataset)
  assert throughput.real_data_prepared(config)
  for path in throughput.PATHS:
    result = throughput.measure_in_process(config, batch_size=2, seconds=0.1, windows=1,
                                           warmup=0.0, path=path)
    assert result["batch_shapes"]["image"] == [2, 224, 224, 3]
    assert result["examples_per_s"] > 0


def test_unprepared_data_gets_stand_in_files(tmp_path):
  config = _config("configs/kanet/voc_deeplab.py", data_dir=str(tmp_path / "absent"))
  assert not throughput.real_data_prepared(config)
  config, source = throughput.with_data(config, str(tmp_path), 3)
  assert source == "stand-in" and throughput.real_data_prepared(config)
  root = os.path.join(config.dataset.manual_dir, "VOCdevkit", "VOC2012")
  assert len(os.listdir(os.path.join(root, "JPEGImages"))) == 5  # 3 train + 2 val


def _write(path, **row):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(row))


def test_needed_rates_and_cores_against_hand_computation(tmp_path):
  row = {"chips": 4, "global_batch": 64, "step_time_s": 0.5, "flops": 1e12,
         "bytes_accessed": 2e9, "fits": True}
  _write(tmp_path / "aot" / "x_net_v5e_2x2.json", **row)
  # One 4-chip host: batch 64 every 0.5 s = 128 examples/s; a GAN with 2 D steps: 256.
  assert throughput.v5e_host_need(str(tmp_path), "x_net")["examples_per_s"] == pytest.approx(128)
  assert throughput.v5e_host_need(str(tmp_path), "x_net", 2)["examples_per_s"] == \
      pytest.approx(256)
  # H100 bf16: 1e12·4/64 = 6.25e10 FLOP/example / 989.4e12 = 63.17 µs > 1.25e8 B / 3.35e12 B/s.
  need = throughput.h100_host_need(str(tmp_path), "x_net", "bfloat16")
  assert need["examples_per_s"] == pytest.approx(8 / (6.25e10 / 989.4e12))
  # Memory-bound in float32 with more bytes: 5e8 B / 3.35e12 B/s per example.
  _write(tmp_path / "aot" / "y_net_v5e_2x2.json", **{**row, "bytes_accessed": 8e9})
  need = throughput.h100_host_need(str(tmp_path), "y_net", "float32")
  assert need["examples_per_s"] == pytest.approx(8 / (5e8 / 3.35e12))
  # A 2x2 compile that does not fit: the 4x4 one, 4 of its 16 chips' batch per host.
  _write(tmp_path / "aot" / "z_net_v5e_2x2.json", **{**row, "fits": False})
  _write(tmp_path / "aot" / "z_net_v5e_4x4.json", **{**row, "chips": 16, "step_time_s": 0.25})
  assert throughput.v5e_host_need(str(tmp_path), "z_net")["examples_per_s"] == pytest.approx(64)
  assert throughput.cores_needed(128.0, 32.0) == pytest.approx(4.0)
  assert throughput.config_stem("configs/sanet/care_planaria.py:cpu") == "sanet_care_planaria"


@pytest.mark.parametrize("argument, expected", [
    ("--configs=configs/no_such.py", "no such file"),
    ("--configs=configs/default.py:nope", "--configs"),
    ("--seconds=0", "--seconds = 0.0: must be positive"),
])
def test_bad_config_is_one_line_exit_2(argument, expected):
  result = subprocess.run([sys.executable, "-m", "experiments.input_throughput", argument],
                          capture_output=True, text=True, timeout=120)
  lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert result.returncode == 2 and len(lines) == 1 and expected in lines[0]
  assert "Traceback" not in result.stderr


def test_photo_sampler_is_seeded():
  a, b = stand_in_files.PhotoSampler(3)(40, 50), stand_in_files.PhotoSampler(3)(40, 50)
  np.testing.assert_array_equal(a, b)


def test_pascal_context_stand_in_is_read_by_the_config_pipeline(tmp_path):
  """VOC2010 photos with 0-59 grey labels in the layout the PASCAL-Context builder reads,
  in both formats; the config's own pipeline batches them at its crop."""
  config = _config("configs/hamburger/pcontext_hamnet.py", data_dir=str(tmp_path / "absent"))
  config, source = throughput.with_data(config, str(tmp_path), 3)
  assert source == "stand-in" and len(sources.records(config.dataset, "train")) == 3
  val = sources.records(config.dataset, "val")
  for example in (val[i] for i in range(len(val))):
    assert example["image"].shape == (375, 500, 3) and example["image"].std() > 20
    labels = set(np.unique(example["segmentation_mask"]))
    assert labels <= {*range(59), 255} and 255 in labels  # background 0 → ignore
  result = throughput.measure_in_process(config, batch_size=2, seconds=0.1, windows=1,
                                         warmup=0.0)
  crop = config.dataset.crop_size
  assert result["batch_shapes"]["image"] == [2, crop, crop, 3]
