"""`python -m attention_lab.aot` on the tiny config: for a 2x2 v5e slice (needs libtpu:
`pip install -e '.[tpu]'`) and for GPUs (needs JAX's CUDA plugin: `pip install -e '.[gpu]'`);
each skipped without its compiler. The shipped GPU target configs agree with the device table."""

import importlib.util
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

from attention_lab import aot, devices

REPO = pathlib.Path(__file__).parents[1]
GIB = 2**30

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu is not installed (pip install -e '.[tpu]')")
needs_cuda_plugin = pytest.mark.skipif(
    not devices.cuda_plugin_installed(), reason="JAX's CUDA plugin is not installed (pip install -e '.[gpu]')")


def _env() -> dict:
  """The tests' environment without tests/conftest.py's XLA:CPU compile-time flags: libtpu
  reads XLA_FLAGS too, and aborts on a flag its XLA does not know."""
  flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
           if f.startswith("--xla_force_host_platform_device_count")]
  return {**os.environ, "XLA_FLAGS": " ".join(flags)}


def _aot(tmp_path, out, *args, topology="v5e:2x2"):
  return subprocess.run(
      [sys.executable, "-m", "attention_lab.aot", "--config=configs/default.py:tiny",
       f"--topology={topology}", f"--json={out}",
       f"--config.dataset.data_dir={tmp_path / 'tfds'}", *args],
      cwd=REPO, capture_output=True, text=True, timeout=600, env=_env())


@needs_libtpu
def test_tiny_config_on_v5e_2x2_and_a_batch_that_does_not_fit(tmp_path):
  out = tmp_path / "fits.json"
  result = _aot(tmp_path, out)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "4 × TPU v5 lite, global batch 16 (4 per device), 4,898 parameters" in result.stdout
  r = json.loads(out.read_text())
  assert r["fits"] and r["compiled"] and r["flops"] > 0 and r["step_time_s"] > 0
  assert r["argument_bytes"] >= 4 * 32 * 32 * 4 + 4898 * 4  # images and parameters

  out = tmp_path / "too_big.json"
  # 2^20 digits of 32x32 at width 8: about 90 GB of temporaries per chip.
  result = _aot(tmp_path, out, "--config.batch_size=1048576")
  assert result.returncode == 1, result.stderr[-3000:]
  assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
  assert "does not fit in 16 GiB of TPU v5 lite HBM on v5e:2x2" in result.stderr
  assert re.search(r"; --config.microbatches=\d+ fits \([\d.]+ GiB", result.stderr)
  assert "4 × TPU v5 lite, global batch 1048576 (262144 per device)" in result.stdout
  r = json.loads(out.read_text())
  assert r["topology"] == "v5e:2x2" and r["chips"] == 4 and r["global_batch"] == 2**20
  assert r["hbm_bytes"] == 16 * 2**30 and not r["fits"]
  assert r["argument_bytes"] >= 2**18 * 32 * 32 * 4  # this chip's images, float32
  assert r["output_bytes"] > 0 and r["temp_bytes"] > r["hbm_bytes"] and not r["compiled"]
  total = r["argument_bytes"] + r["output_bytes"] + r["temp_bytes"] - r["alias_bytes"]
  assert r["total_bytes"] == total > r["hbm_bytes"]


@needs_libtpu
def test_the_imagenet_sanet_compiles_without_its_data(tmp_path):
  """The paper config (ImageNet, not prepared: an empty data_dir), narrowed to compile fast:
  the task comes from the dataset's facts, nothing is read or patched."""
  result = subprocess.run(
      [sys.executable, "-m", "attention_lab.aot", "--config=configs/sanet/imagenet.py",
       "--topology=v5e:2x2", f"--config.dataset.data_dir={tmp_path / 'empty'}",
       "--config.batch_size=8", "--config.bn_group_size=0", "--config.model.width=0.125",
       "--config.dataset.image_size=32", "--config.model.image_size=32"],
      cwd=REPO, capture_output=True, text=True, timeout=600, env=_env())
  assert result.returncode == 0, result.stderr[-3000:]
  assert "4 × TPU v5 lite, global batch 8 (2 per device)" in result.stdout
  assert not (tmp_path / "empty").exists()  # nothing was prepared


def test_the_smallest_number_of_microbatches_that_fits(monkeypatch):
  """Powers of two from the config's k up, while they divide the batch and the BatchNorm
  groups stay whole on each device."""
  from configs import default  # pylint: disable=g-import-not-at-top
  tried = []

  def analyse(config, topology, bn_groups_per_chip):
    del topology
    assert not bn_groups_per_chip  # the trials keep the groups aot compiled with
    tried.append(config.microbatches)
    if config.batch_size // config.microbatches % max(config.bn_group_size, 1):
      raise ValueError("bn_group_size must divide each device's share")
    return {"fits": config.microbatches >= 4, "total_bytes": 1 << 30, "step_time_s": 0.1}

  monkeypatch.setattr(aot, "analyse", analyse)
  config = default.get_config("tiny")  # batch 16
  assert aot.smallest_microbatches(config, "v5e:2x2")["microbatches"] == 4
  assert tried == [2, 4]
  config.bn_group_size, tried[:] = 8, []
  assert aot.smallest_microbatches(config, "v5e:2x2") is None and tried == [2, 4]
  config.bn_group_size, config.batch_size, tried[:] = 0, 6, []
  assert aot.smallest_microbatches(config, "v5e:2x2") is None and tried == [2]


@needs_cuda_plugin
def test_tiny_config_on_two_h100s(tmp_path):
  import jax  # pylint: disable=g-import-not-at-top
  from attention_lab import cli  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_platforms", "cpu")
  config = cli.load_config("configs/default.py:tiny")
  config.dataset.data_dir = str(tmp_path / "tfds")
  r = aot.analyse(config, "h100x2")
  assert "2 × NVIDIA H100 80GB HBM3, global batch 16 (8 per device), 4,898 parameters" in (
      aot.report(r))
  assert r["fits"] and r["compiled"] and r["chips"] == 2
  assert r["hbm_bytes"] == 84_942_979_072 and r["peak_flops_per_s"] == 494.7e12  # TF32
  assert r["argument_bytes"] >= 8 * 32 * 32 * 4 + 4898 * 4  # this GPU's images, parameters
  # FLOPs per GPU: the unpartitioned step's over 2 GPUs, at least the forward and backward
  # multiply-adds of the first 3x3 convolution (1 → 8 channels) on this GPU's 8 images.
  assert r["flops"] >= 3 * 2 * 8 * 32 * 32 * 9 * 8
  assert r["step_time_s"] == pytest.approx(
      max(r["flops"] / 494.7e12, r["bytes_accessed"] / 3.35e12))


@needs_cuda_plugin
def test_a_batch_that_does_not_fit_a_gtx_1080_ti_exits_1(tmp_path):
  out = tmp_path / "too_big.json"
  result = _aot(tmp_path, out, "--config.batch_size=1048576", topology="gtx_1080_ti")
  assert result.returncode == 1, result.stderr[-3000:]
  assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
  assert ("does not fit in 10.9 GiB of NVIDIA GeForce GTX 1080 Ti device memory on "
          "gtx_1080_ti") in result.stderr
  r = json.loads(out.read_text())
  assert not r["fits"] and r["argument_bytes"] >= 2**20 * 32 * 32 * 4  # the images
  total = r["argument_bytes"] + r["output_bytes"] + r["temp_bytes"] - r["alias_bytes"]
  assert r["total_bytes"] == total > r["hbm_bytes"] == 11_721_506_816


def test_an_unknown_topology_is_one_line_naming_the_allowed_values(tmp_path):
  result = _aot(tmp_path, tmp_path / "out.json", topology="b200")
  assert result.returncode == 2, result.stderr[-3000:]
  assert result.stderr.startswith("error: --topology = 'b200': expected a TPU slice such as "
                                  "v5e:2x2")
  assert result.stderr.count("\n") == 1
  assert "a100, gtx_1080_ti, h100, h200, rtx_2080_ti, rtx_4090, titan_xp, v100" in result.stderr
  for topology in ("h100x0", "h100:2x2", "xh100", "H100"):
    with pytest.raises(ValueError, match=f"--topology = {topology!r}: .*titan_xp"):
      aot.topology_devices(topology)


@pytest.mark.skipif(devices.cuda_plugin_installed(), reason="JAX's CUDA plugin is installed")
def test_a_gpu_without_the_cuda_plugin_says_how_to_install_it():
  with pytest.raises(ValueError, match=re.escape("needs JAX's CUDA plugin: pip install -e "
                                                 "'.[gpu]'")):
    aot.topology_devices("h100x8")


def _field(text: str, name: str) -> str:
  return re.search(rf"^\s*{name}: \"?([^\"\n]+)\"?$", text, re.M).group(1)


@pytest.mark.parametrize("name", devices.gpu_names())
def test_each_gpu_target_names_a_device_of_the_table_with_its_memory_bandwidth_and_l2(name):
  text = devices.gpu_target_config(name)
  assert text.startswith("# ") and "platform_name: \"CUDA\"" in text
  device = devices.lookup(_field(text, "device_description_str"))
  assert device is not None, name
  assert device.memory_bytes == int(_field(text, "device_memory_size"))
  assert device.memory_bandwidth == pytest.approx(float(_field(text, "memory_bandwidth")),
                                                  rel=0.01)
  assert device.l2_bytes == int(_field(text, "l2_cache_size"))
  # The FP32 peak: SMs × FP32 lanes per SM × 2 (multiply-add) × clock, within 1%.
  fp32 = (int(_field(text, "core_count")) * int(_field(text, "fpus_per_core")) * 2
          * float(_field(text, "clock_rate_ghz")) * 1e9)
  if "V100" in device.name or "Ti" in device.name or "Xp" in device.name:
    assert device.peak("float32") == pytest.approx(fp32, rel=0.01)


@needs_cuda_plugin
def test_each_gpu_target_gives_xla_a_device_of_its_kind():
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_platforms", "cpu")
  for name in devices.gpu_names():
    (device,) = devices.gpu_devices(name)
    text = devices.gpu_target_config(name)
    assert device.device_kind == _field(text, "device_description_str")
    assert devices.lookup(device.device_kind) is not None


@needs_cuda_plugin
def test_a_dot_that_triton_cannot_tile_without_a_gpu_compiles_with_cublas():
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_platforms", "cpu")
  (h100,) = devices.gpu_devices("h100")
  image = jax.ShapeDtypeStruct((12, 33, 33, 21), "float32",
                               sharding=jax.sharding.SingleDeviceSharding(h100))
  # The gradient of a bilinear 33 → 513 upsampling: an f32[129276, 513] dot, highest precision.
  grad = jax.grad(lambda x: (jax.image.resize(x, (12, 513, 513, 21), "bilinear") ** 2).sum())
  compiled, options = aot.compile_lowered(jax.jit(grad).lower(image))
  assert options == {"xla_gpu_enable_triton_gemm": False}
  assert compiled.memory_analysis().temp_size_in_bytes >= 12 * 513 * 513 * 21 * 4


def test_the_tpu_table_has_every_train_config_and_the_cpu_sized_ones_on_one_slice():
  from experiments import aot_table  # pylint: disable=g-import-not-at-top
  rows = aot_table.tpu_rows()
  configs = aot_table.train_configs()
  assert "configs/hamburger/pcontext_hamnet.py" in configs and "configs/gan/default.py" in configs
  assert not any("/efficiency/" in c for c in configs)
  for config in configs:
    slices = [t for c, t in rows if c == config]
    small = config.endswith("/default.py") or config.endswith("digits_backbone.py")
    assert slices == (["v5e:2x2"] if small else ["v5e:2x2", "v5e:4x4"]), config
  assert aot_table.tpu_rows(["configs/isa/cifar10.py"], ["v4:2x2x2"]) == [
      ("configs/isa/cifar10.py", "v4:2x2x2")]
  assert [t for _, t, _ in aot_table.gpu_rows(["configs/hamburger/voc_hamnet.py"])] == [
      "titan_xp", "h100", "h100x4"]  # the :ablation rows and the R-101 row


def test_a_table_of_named_rows_keeps_every_other_row_from_its_json(tmp_path, monkeypatch):
  from experiments import aot_table  # pylint: disable=g-import-not-at-top
  saved = REPO / "experiments/results/aot_gpu/sanet_care_flywing_h100.json"
  monkeypatch.setattr(aot_table, "RESULTS", str(tmp_path))
  (tmp_path / "aot_gpu").mkdir()
  (tmp_path / "aot_gpu/sanet_care_flywing_h100.json").write_text(saved.read_text())
  aot_table.gpu_table(["configs/sanet/care_flywing.py"], redo=None)  # table only
  md = (tmp_path / "aot_gpu.md").read_text()
  rows = [l for l in md.splitlines() if l.startswith("| [configs/")]
  assert len(rows) == len(aot_table.gpu_rows()) > 20
  flywing = [r for r in rows if "care_flywing" in r]
  assert len(flywing) == 1 and "not compiled" not in flywing[0] and "365,530" in flywing[0]
  assert sum("not compiled" in r for r in rows) == len(rows) - 1
  (result,) = json.loads((tmp_path / "aot_gpu.json").read_text())
  assert result["config"] == "configs/sanet/care_flywing.py" and result["topology"] == "h100"


def test_batch_norm_groups_that_would_span_chips_become_one_chips_share():
  """The paper's per-GPU groups on more chips than the paper's GPUs: aot compiles with one
  chip's share as the group and says so; a run still refuses them (train/state.py)."""
  import jax  # pylint: disable=g-import-not-at-top
  from attention_lab import cli  # pylint: disable=g-import-not-at-top
  from attention_lab.train import state as state_lib  # pylint: disable=g-import-not-at-top
  config = cli.load_config("configs/default.py:tiny")  # batch 16
  config.bn_group_size = 8
  with pytest.raises(ValueError, match=r"^bn_group_size = 8: must be 0 .* devices = 4\)"):
    state_lib.check_batch(config, state_lib.make_mesh(config, jax.devices()[:4]))
  compiled, paper, (mesh, _, state, batch, step) = aot.prepare(config, jax.devices()[:4])
  assert (paper, compiled.bn_group_size, mesh.size, config.bn_group_size) == (8, 4, 4, 8)
  step.lower(state, batch)
  for group, chips, microbatches in ((8, 2, 1), (4, 4, 1), (0, 8, 1), (8, 2, 2)):
    config.bn_group_size, config.microbatches = group, microbatches
    adapted = config.copy_and_resolve_references()
    expected = 16 // microbatches // chips if group > 16 // microbatches // chips else None
    assert aot.adapt_bn_groups(adapted, chips) == (group if expected else None)
    assert adapted.bn_group_size == (expected or group)
  r = {"topology": "v5e:4x4", "chips": 16, "device_kind": "TPU v5 lite", "global_batch": 640,
       "bn_group_size": 40, "paper_bn_group_size": 80, "parameters": 1}
  assert ("global batch 640 (40 per device, BatchNorm groups of 40: one chip's share, the "
          "config's 80 would span chips), 1 parameters") in aot.report({
              **r, "argument_bytes": 0, "output_bytes": 0, "temp_bytes": 0, "alias_bytes": 0,
              "total_bytes": 0, "hbm_bytes": 1, "fits": True, "flops": 0, "bytes_accessed": 0,
              "step_time_s": 0, "peak_flops_per_s": 1e12, "peak_dtype": "bfloat16",
              "hbm_bytes_per_s": 1e9, "cost_source": "compiled program"})


def _documented_aot_commands() -> list[list[str]]:
  """The argv of every `python -m attention_lab.aot` command that README.md, the config
  docstrings and aot's own docstring show (tests/test_documented_commands.py's reading)."""
  # pylint: disable=protected-access
  from tests import test_documented_commands as documented  # pylint: disable=g-import-not-at-top
  commands = []
  for text in [text for _, text in documented._sources()] + [aot.__doc__]:
    for command in documented._command_texts(text):
      module, variants = documented._variants(command)
      commands += [[a for a in argv if not a.startswith("--json")] for argv in variants
                   if module == "attention_lab.aot" and argv not in commands]
  return commands


AOT_COMMANDS = _documented_aot_commands()


def _chips(topology: str) -> int:
  """A topology's device count, read from its name (no libtpu or CUDA plugin needed): TPU
  v4 and newer have one JAX device per chip."""
  if ":" not in topology:
    return int(re.fullmatch(r"[a-z0-9_]+?(?:x(\d+))?", topology).group(1) or 1)
  version, shape = topology.split(":")
  assert version in ("v4", "v5e", "v5p", "v6e"), topology
  return math.prod(map(int, shape.split("x")))


# aot's checks and lowering of a documented command over the CPU devices of the process.
LOWER = """
import sys
import jax
from attention_lab import aot
from tests.test_documented_commands import parsed_config
config, paper, (mesh, _, state, batch, step) = aot.prepare(parsed_config(sys.argv[1:]),
                                                           jax.devices())
step.lower(state, batch)
print("lowered over", mesh.size, "devices, BatchNorm groups", config.bn_group_size,
      "adapted from", paper)
"""


def test_the_documented_aot_commands_are_collected():
  assert all(a[1].startswith("--topology=") for a in AOT_COMMANDS)
  assert ["--config=configs/sanet/imagenet.py", "--topology=v5e:4x4"] in AOT_COMMANDS
  assert ["--config=configs/isa/cifar10.py", "--topology=h100"] in AOT_COMMANDS


@pytest.mark.parametrize("argv", AOT_COMMANDS, ids=" ".join)
def test_documented_aot_command_on_its_topologys_device_count(argv):
  """Without the target's compiler: aot's checks, BatchNorm adaptation and lowering over as
  many (CPU) devices as the topology has, in a process with that many."""
  topology = next(a.split("=", 1)[1] for a in argv if a.startswith("--topology="))
  chips = _chips(topology)
  env = {**_env(), "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO),
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={chips}"}
  result = subprocess.run([sys.executable, "-c", LOWER, *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=900, env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  assert f"lowered over {chips} devices" in result.stdout


@pytest.mark.parametrize("argv", [
    pytest.param(a, marks=needs_libtpu if ":" in a[1] else needs_cuda_plugin, id=" ".join(a))
    for a in AOT_COMMANDS])
def test_documented_aot_command_compiles_for_its_target(argv, tmp_path):
  """The real command with the target's compiler: an answer (fits, exit 0; does not fit,
  exit 1), never a refused configuration (exit 2)."""
  result = subprocess.run([sys.executable, "-m", "attention_lab.aot", *argv,
                           f"--json={tmp_path / 'out.json'}"], cwd=REPO, capture_output=True,
                          text=True, timeout=3000, env=_env())
  assert result.returncode in (0, 1), result.stderr[-3000:]
  r = json.loads((tmp_path / "out.json").read_text())
  assert r["chips"] == _chips(r["topology"]) and r["compiled"]
