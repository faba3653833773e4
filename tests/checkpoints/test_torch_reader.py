"""The torch-free checkpoint reader on files written in torch's two layouts.

The writer below is independent of the reader: a pure-Python pickler that
emits torch's globals (`torch._utils._rebuild_tensor_v2`, `torch.FloatStorage`,
...) as GLOBAL opcodes and storages as persistent ids, laid out as
torch/serialization.py's `_save` (zip) and `_legacy_save` do. Where torch is
installed, files from the real `torch.save` are read too.
"""

import collections
import io
import itertools
import pickle
import struct
import zipfile

import ml_dtypes
import numpy as np
import pytest

from attention_lab.checkpoints import UnsupportedCheckpointError
from attention_lab.checkpoints import load_torch_checkpoint
from attention_lab.checkpoints import load_torch_state_dict
from tests import peers

_STORAGE_NAMES = {
    np.dtype(np.float32): "FloatStorage", np.dtype(np.float64): "DoubleStorage",
    np.dtype(np.float16): "HalfStorage", np.dtype(ml_dtypes.bfloat16): "BFloat16Storage",
    np.dtype(np.int64): "LongStorage", np.dtype(np.int32): "IntStorage",
    np.dtype(np.uint8): "ByteStorage", np.dtype(np.bool_): "BoolStorage",
}


class Global:
  """Pickled as GLOBAL module\\nname (the object need not exist here)."""

  def __init__(self, module, name):
    self.module, self.name = module, name

  def __call__(self, *args):  # pickle requires REDUCE's function to be callable.
    raise AssertionError("never called")


class Storage:

  def __init__(self, key, data):
    self.key, self.data = key, np.ascontiguousarray(data).ravel()


class Tensor:

  def __init__(self, storage, offset, size, stride, parameter=False):
    self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
    self.parameter = parameter

  def __reduce__(self):
    tensor = (Global("torch._utils", "_rebuild_tensor_v2"),
              (self.storage, self.offset, tuple(self.size), tuple(self.stride), False,
               collections.OrderedDict()))
    if not self.parameter:
      return tensor
    plain = Tensor(self.storage, self.offset, self.size, self.stride)
    return (Global("torch._utils", "_rebuild_parameter"),
            (plain, True, collections.OrderedDict()))


class TorchPickler(pickle._Pickler):  # pylint: disable=protected-access
  """Protocol-2 pickler writing Global markers and torch-style storage persistent ids."""

  dispatch = pickle._Pickler.dispatch.copy()  # pylint: disable=protected-access

  def __init__(self, file, legacy):
    super().__init__(file, protocol=2)
    self.legacy, self.storages = legacy, {}

  def save_global_marker(self, obj):
    self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
    self.memoize(obj)

  dispatch[Global] = save_global_marker

  def persistent_id(self, obj):
    if not isinstance(obj, Storage):
      return None
    self.storages[obj.key] = obj
    pid = ("storage", Global("torch", _STORAGE_NAMES[obj.data.dtype]), obj.key, "cpu",
           obj.data.size)
    return pid + (None,) if self.legacy else pid


def write_zip(path, obj, byteorder="little", folder="archive"):
  buffer = io.BytesIO()
  pickler = TorchPickler(buffer, legacy=False)
  pickler.dump(obj)
  with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
    archive.writestr(f"{folder}/data.pkl", buffer.getvalue())
    archive.writestr(f"{folder}/byteorder", byteorder)
    for key, storage in pickler.storages.items():
      data = storage.data
      if byteorder == "big":
        data = data.astype(data.dtype.newbyteorder(">"))
      archive.writestr(f"{folder}/data/{key}", data.tobytes())
    archive.writestr(f"{folder}/version", "3\n")


def write_legacy(path, obj):
  with open(path, "wb") as f:
    pickle.dump(0x1950a86a20f9469cfc6c, f, protocol=2)
    pickle.dump(1001, f, protocol=2)
    pickle.dump({"protocol_version": 1001, "little_endian": True,
                 "type_sizes": {"short": 2, "int": 4, "long": 4}}, f, protocol=2)
    pickler = TorchPickler(f, legacy=True)
    pickler.dump(obj)
    keys = sorted(pickler.storages)
    pickle.dump(keys, f, protocol=2)
    for key in keys:
      data = pickler.storages[key].data
      f.write(struct.pack("<q", data.size))
      f.write(data.astype(data.dtype.newbyteorder("<")).tobytes())


def naive_view(flat, offset, size, stride):
  """Element by element: out[i] = flat[offset + Σ i_d stride_d]."""
  out = np.empty(size, flat.dtype)
  for index in itertools.product(*(range(n) for n in size)):
    out[index] = flat[offset + sum(i * s for i, s in zip(index, stride))]
  return out


def _cases():
  rng = np.random.default_rng(0)
  shared = Storage("0", rng.normal(size=20).astype(np.float32))
  cases = {  # name: (storage, offset, size, stride)
      "conv.weight": (Storage("1", rng.normal(size=3 * 5 * 7 * 2)), 0, (3, 5, 7, 2),
                      (70, 14, 2, 1)),
      "odd.half": (Storage("2", rng.normal(size=5).astype(np.float16)), 0, (5,), (1,)),
      "odd.bf16": (Storage("3", rng.normal(size=12).astype(ml_dtypes.bfloat16)), 0, (4, 3),
                   (3, 1)),
      "bn.num_batches_tracked": (Storage("4", np.array([17], np.int64)), 0, (), ()),
      "ints.int32": (Storage("5", rng.integers(-9, 9, size=7).astype(np.int32)), 0, (7,), (1,)),
      "ints.uint8": (Storage("6", rng.integers(0, 255, size=8).astype(np.uint8)), 0, (2, 2, 2),
                     (4, 2, 1)),
      "flags": (Storage("7", np.array([True, False, True])), 0, (3,), (1,)),
      "transposed": (Storage("8", rng.normal(size=12).astype(np.float32)), 0, (4, 3), (1, 4)),
      "shared.full": (shared, 0, (4, 5), (5, 1)),
      "shared.offset": (shared, 5, (3, 5), (5, 1)),
      "shared.strided": (shared, 1, (2, 3), (10, 2)),
      "empty": (Storage("9", np.zeros(0, np.float32)), 0, (0, 3), (3, 1)),
  }
  cases["conv.weight"][0].data = cases["conv.weight"][0].data.astype(np.float64)
  return cases


def _state(cases, parameters=("conv.weight", "transposed")):
  return collections.OrderedDict(
      (name, Tensor(*args, parameter=name in parameters)) for name, args in cases.items())


def _check(result, cases):
  assert list(result) == list(cases)
  for name, (storage, offset, size, stride) in cases.items():
    expected = naive_view(storage.data, offset, size, stride)
    assert result[name].dtype == storage.data.dtype, name
    assert result[name].shape == tuple(size), name
    np.testing.assert_array_equal(result[name], expected, err_msg=name)
    assert result[name].flags.c_contiguous and result[name].flags.writeable


@pytest.mark.parametrize("fmt", ["zip", "zip_big_endian", "zip_named_folder", "legacy"])
def test_reads_both_layouts(tmp_path, fmt):
  cases = _cases()
  path = tmp_path / "weights.pth"
  if fmt == "legacy":
    write_legacy(path, _state(cases))
  else:
    write_zip(path, _state(cases), byteorder="big" if fmt == "zip_big_endian" else "little",
              folder="resnet18-f37072fd" if fmt == "zip_named_folder" else "archive")
  assert zipfile.is_zipfile(path) == (fmt != "legacy")
  result = load_torch_state_dict(path)
  _check(result, cases)
  # Shared storage: the arrays are independent copies.
  result["shared.full"][1, 0] = 123.0
  assert result["shared.offset"][0, 0] != 123.0


def test_nested_checkpoints(tmp_path):
  cases = _cases()
  obj = {"epoch": 90, "arch": "resnet", "state_dict": _state(cases),
         "optimizer": {"lr": 0.1, "momentum": [Tensor(*cases["odd.half"])]}}
  path = tmp_path / "checkpoint.pth"
  write_zip(path, obj)
  whole = load_torch_checkpoint(path)
  assert whole["epoch"] == 90 and whole["arch"] == "resnet" and whole["optimizer"]["lr"] == 0.1
  assert isinstance(whole["state_dict"], collections.OrderedDict)
  np.testing.assert_array_equal(whole["optimizer"]["momentum"][0], cases["odd.half"][0].data)
  _check(load_torch_state_dict(path), cases)  # Unwraps 'state_dict'.
  _check(load_torch_state_dict(path, key="state_dict"), cases)
  with pytest.raises(ValueError, match="key"):
    load_torch_state_dict(path, key="model")
  # No known wrapper key: nested dicts flattened with '.', non-tensors dropped.
  write_legacy(path, {"backbone": {"conv": {"weight": Tensor(*cases["transposed"])}},
                      "head": _state({"bias": cases["ints.int32"]}), "step": 3})
  flat = load_torch_state_dict(path)
  assert list(flat) == ["backbone.conv.weight", "head.bias"]
  np.testing.assert_array_equal(flat["head.bias"], cases["ints.int32"][0].data)


def test_legacy_storage_views(tmp_path):
  """torch < 0.4 wrote views of a root storage: (view key, offset, size) in the id."""
  root = Storage("140", np.arange(10, dtype=np.float32))

  class ViewPickler(TorchPickler):

    def persistent_id(self, obj):
      pid = super().persistent_id(obj)
      return None if pid is None else pid[:5] + (("view-7", 4, 6),)

  path = tmp_path / "old.pth"
  with open(path, "wb") as f:
    for header in (0x1950a86a20f9469cfc6c, 1001, {"little_endian": True}):
      pickle.dump(header, f, protocol=2)
    pickler = ViewPickler(f, legacy=True)
    pickler.dump({"w": Tensor(root, 1, (2, 2), (2, 1))})
    pickle.dump(["140"], f, protocol=2)
    f.write(struct.pack("<q", 10) + root.data.tobytes())
  # The view starts at element 4 of the root; the tensor at element 1 of the view.
  np.testing.assert_array_equal(load_torch_state_dict(path)["w"], [[5, 6], [7, 8]])


def test_torch_0_3_files(tmp_path):
  """2017-era files: _rebuild_tensor (v1) with torch.Size sizes, CUDA storage types."""
  data = np.arange(12, dtype=np.float32)

  class Size:

    def __reduce__(self):
      return (Global("torch", "Size"), ((3, 2),))

  class OldTensor:

    def __reduce__(self):
      return (Global("torch._utils", "_rebuild_tensor"), (Storage("93", data), 1, Size(), (4, 1)))

  class CudaPickler(TorchPickler):

    def persistent_id(self, obj):
      pid = super().persistent_id(obj)
      if pid is None:
        return None
      return (pid[0], Global("torch.cuda", "FloatStorage"), pid[2], "cuda:0") + pid[4:]

  path = tmp_path / "resnet-2017.pth"
  with open(path, "wb") as f:
    for header in (0x1950a86a20f9469cfc6c, 1001, {"little_endian": True}):
      pickle.dump(header, f, protocol=2)
    CudaPickler(f, legacy=True).dump(collections.OrderedDict(fc=OldTensor()))
    pickle.dump(["93"], f, protocol=2)
    f.write(struct.pack("<q", 12) + data.tobytes())
  np.testing.assert_array_equal(load_torch_state_dict(path)["fc"],
                                naive_view(data, 1, (3, 2), (4, 1)))


def test_rejects_code_and_corrupt_files(tmp_path):
  path = tmp_path / "evil.pth"
  buffer = io.BytesIO()

  class Evil:

    def __reduce__(self):
      return (Global("os", "system"), ("echo owned",))

  TorchPickler(buffer, legacy=False).dump({"x": Evil()})
  with zipfile.ZipFile(path, "w") as archive:
    archive.writestr("archive/data.pkl", buffer.getvalue())
  with pytest.raises(UnsupportedCheckpointError, match="os.system"):
    load_torch_checkpoint(path)
  with open(path, "wb") as f:  # Legacy header with a malicious first pickle.
    f.write(buffer.getvalue())
  with pytest.raises(UnsupportedCheckpointError):
    load_torch_checkpoint(path)

  storage = Storage("0", np.zeros(6, np.float32))
  write_zip(path, {"w": Tensor(storage, 2, (2, 3), (3, 1))})  # Reads past the storage.
  with pytest.raises(UnsupportedCheckpointError, match="storage of 6 elements"):
    load_torch_state_dict(path)
  path.write_bytes(b"not a checkpoint")
  with pytest.raises(UnsupportedCheckpointError, match="not a torch.save file|neither"):
    load_torch_state_dict(path)
  with pytest.raises(FileNotFoundError):
    load_torch_state_dict(tmp_path / "missing.pth")
  write_zip(path, [Tensor(storage, 0, (6,), (1,))])
  with pytest.raises(ValueError, match="expected a dict"):
    load_torch_state_dict(path)
  np.testing.assert_array_equal(load_torch_checkpoint(path)[0], np.zeros(6, np.float32))


@pytest.mark.parametrize("legacy", [False, True])
def test_matches_real_torch_save(tmp_path, legacy):
  torch = peers.require("torch")
  torch.manual_seed(0)
  model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.BatchNorm2d(5),
                              torch.nn.Linear(7, 3))
  model[1].num_batches_tracked += 4
  base = torch.randn(6, 7, dtype=torch.float64)
  state = model.state_dict()
  state.update({
      "transposed": base.t(),
      "offset": base[2:, 1:5],
      "strided": base[::2, ::3],
      "half": torch.randn(3, 5).half(),
      "bf16": torch.randn(4, 3).bfloat16(),
      "int32": torch.arange(-3, 4, dtype=torch.int32),
      "uint8": torch.arange(8, dtype=torch.uint8).reshape(2, 2, 2),
      "bool": torch.tensor([True, False, True]),
      "scalar": torch.tensor(2.5),
      "param": torch.nn.Parameter(torch.randn(2, 3)),
  })
  path = tmp_path / "torch.pth"
  torch.save({"state_dict": state, "epoch": 3}, path, _use_new_zipfile_serialization=not legacy)
  assert zipfile.is_zipfile(path) == (not legacy)
  result = load_torch_state_dict(path)
  assert list(result) == list(state)
  for name, tensor in state.items():
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
      expected = tensor.float().numpy().astype(ml_dtypes.bfloat16)
    else:
      expected = tensor.numpy()
    assert result[name].dtype == expected.dtype and result[name].shape == expected.shape, name
    np.testing.assert_array_equal(result[name], expected, err_msg=name)
  assert load_torch_checkpoint(path)["epoch"] == 3
