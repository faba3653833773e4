"""Read PyTorch `torch.save` files into numpy arrays without importing torch.

Both of torch's formats are read:
- zip (torch >= 1.6, the default; e.g. torchvision's ResNet `.pth` files): a
  zip archive whose entries share one top-level folder (`archive/` or the
  file's stem): `data.pkl` (the object, pickle protocol 2, every storage
  replaced by the persistent id `('storage', StorageType, key, location,
  numel)`), `data/<key>` (each storage's raw bytes) and `byteorder`
  (`little` | `big`; absent in old files, which are little-endian).
- legacy (torch < 1.6 or `_use_new_zipfile_serialization=False`; possibly
  pytorch-fid's `pt_inception-2015-12-05-6726825d.pth`): five consecutive
  pickles (the magic number 0x1950a86a20f9469cfc6c, the protocol version
  1001, a sys_info dict, the object with persistent ids `('storage',
  StorageType, key, location, numel, view_metadata)`, the sorted list of
  storage keys), then for each key in that order an int64 little-endian
  element count and the storage's little-endian raw bytes.

A tensor is pickled as `torch._utils._rebuild_tensor_v2(storage,
storage_offset, size, stride, requires_grad, backward_hooks[, metadata])`
(sizes, strides and offsets in elements); a parameter as
`torch._utils._rebuild_parameter(tensor, requires_grad, backward_hooks)`; files
of torch < 0.4 (e.g. torchvision's 2017 ResNet weights) use
`_rebuild_tensor(storage, storage_offset, size, stride)` and, when saved from
a GPU, `torch.cuda.<X>Storage`; both are read (always onto the CPU).
Each tensor becomes a C-contiguous numpy copy of the strided view (checked
against the storage's bounds), so tensors that shared a storage no longer
share memory.

Unpickling is restricted (`find_class` allows only the globals above, torch
storage types and dtypes, `collections.OrderedDict`, `torch.Size`, and a
few builtins / numpy scalar constructors), so a checkpoint cannot run code;
anything else raises `UnsupportedCheckpointError` naming the global.

dtypes: float32/64/16, int8/16/32/64, uint8, bool, complex64/128 map to
numpy; bfloat16 maps to `ml_dtypes.bfloat16` (the dtype JAX uses).

Time and memory O(file size): every storage is read once.
"""

import collections
import io
import os
import pickle
import struct
import zipfile

import ml_dtypes
import numpy as np
from etils import epath

__all__ = ["UnsupportedCheckpointError", "load_torch_checkpoint", "load_torch_state_dict"]

LEGACY_MAGIC_NUMBER = 0x1950a86a20f9469cfc6c
LEGACY_PROTOCOL_VERSION = 1001

# torch storage type / dtype name -> numpy dtype.
_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_, "ComplexFloatStorage": np.complex64,
    "ComplexDoubleStorage": np.complex128, "UntypedStorage": np.uint8,
}
_TORCH_DTYPES = {
    "float32": np.float32, "float": np.float32, "float64": np.float64, "double": np.float64,
    "float16": np.float16, "half": np.float16, "bfloat16": ml_dtypes.bfloat16,
    "int64": np.int64, "long": np.int64, "int32": np.int32, "int": np.int32,
    "int16": np.int16, "short": np.int16, "int8": np.int8, "uint8": np.uint8,
    "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_,
    "complex64": np.complex64, "cfloat": np.complex64, "complex128": np.complex128,
    "cdouble": np.complex128,
}
# Keys under which training scripts commonly nest the weights.
_WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "net", "params", "module")


class UnsupportedCheckpointError(ValueError):
  """The file is not a torch.save checkpoint this reader can (safely) read."""


class _StorageType:
  """Stands for `torch.<X>Storage` (or a torch dtype) inside the unpickler."""

  def __init__(self, name, dtype):
    self.name, self.dtype = name, np.dtype(dtype)


class _Storage:
  """A deserialised storage: a flat numpy array filled once the bytes are read."""

  def __init__(self, dtype, numel):
    self.dtype, self.numel, self.array = np.dtype(dtype), int(numel), None


class _StorageView:
  """Legacy storage views: elements [offset, offset + size) of a root storage."""

  def __init__(self, root, offset, size):
    self.root, self.offset, self.size = root, int(offset), int(size)
    self.dtype = root.dtype

  @property
  def array(self):
    return self.root.array[self.offset:self.offset + self.size]


class _Tensor:
  """A tensor to build once the storages are read (the legacy format stores them last)."""

  def __init__(self, storage, offset, size, stride, dtype=None):
    self.storage, self.offset = storage, int(offset)
    self.size, self.stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    self.dtype = np.dtype(dtype) if dtype is not None else None

  def materialize(self):
    flat = self.storage.array
    if self.dtype is not None and self.dtype != flat.dtype:  # Untyped storage + dtype (v3).
      flat = flat.view(np.uint8).view(self.dtype)
    if len(self.size) != len(self.stride):
      raise UnsupportedCheckpointError(
          f"tensor size {self.size} and stride {self.stride} have different ranks")
    if any(s < 0 for s in self.size) or any(s < 0 for s in self.stride) or self.offset < 0:
      raise UnsupportedCheckpointError(
          f"negative size, stride or offset: {self.size}, {self.stride}, {self.offset}")
    if 0 in self.size:
      return np.zeros(self.size, flat.dtype)
    last = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride))
    if last >= flat.size:
      raise UnsupportedCheckpointError(
          f"tensor (offset {self.offset}, size {self.size}, stride {self.stride}) reads "
          f"element {last} of a storage of {flat.size} elements")
    view = np.lib.stride_tricks.as_strided(
        flat[self.offset:], shape=self.size,
        strides=tuple(s * flat.itemsize for s in self.stride), writeable=False)
    return np.array(view, order="C")


def _rebuild_tensor(storage, storage_offset, size, stride):
  return _Tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
  del requires_grad, backward_hooks, metadata
  return _Tensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
  del requires_grad, backward_hooks, metadata
  return _Tensor(storage, storage_offset, size, stride, dtype.dtype)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None):
  del requires_grad, backward_hooks, state
  return data


def _rebuild_from_type_v2(func, new_type, args, state):
  del new_type, state  # torch.Tensor / Parameter subclasses: keep the data only.
  return func(*args)


def _torch_size(*args):
  return tuple(*args)


def _torch_device(*args):
  return ":".join(str(a) for a in args)


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,  # torch < 0.4 (2017 weights).
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch._tensor", "Tensor"): "Tensor",
    ("torch.nn.parameter", "Parameter"): "Parameter",
    ("torch", "Size"): _torch_size,
    ("torch", "device"): _torch_device,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("__builtin__", "set"): set,
    ("_codecs", "encode"): lambda text, encoding="utf-8": text.encode(encoding),
    # numpy scalars and small arrays that training scripts store (e.g. a best accuracy).
    ("numpy", "dtype"): np.dtype,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy.core.multiarray", "scalar"): np._core.multiarray.scalar,
    ("numpy.core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
    ("numpy._core.multiarray", "scalar"): np._core.multiarray.scalar,
    ("numpy._core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
}


class _Unpickler(pickle.Unpickler):
  """Unpickler that resolves only the allowed globals and torch's storage ids."""

  def __init__(self, file, storage_factory):
    super().__init__(file, encoding="latin1")  # Python 2 era checkpoints.
    self._storage_factory = storage_factory

  def find_class(self, module, name):
    if (module, name) in _ALLOWED:
      return _ALLOWED[(module, name)]
    if module in ("torch", "torch.cuda") and name in _STORAGE_DTYPES:  # cuda: legacy GPU saves.
      return _StorageType(name, _STORAGE_DTYPES[name])
    if module == "torch" and name in _TORCH_DTYPES:
      return _StorageType(name, _TORCH_DTYPES[name])
    raise UnsupportedCheckpointError(
        f"checkpoint needs the global {module}.{name}, which this torch-free reader does not "
        "allow (it reads tensors, parameters, storages, dicts, OrderedDicts, lists, tuples, "
        "numbers and strings; whole pickled nn.Modules, sparse or quantized tensors and "
        "arbitrary classes are not supported: save the model's state_dict() instead)")

  def persistent_load(self, pid):
    if not isinstance(pid, tuple) or not pid:
      raise UnsupportedCheckpointError(f"unexpected persistent id {pid!r}")
    typename = pid[0].decode("ascii") if isinstance(pid[0], bytes) else pid[0]
    if typename != "storage":
      raise UnsupportedCheckpointError(
          f"persistent id of kind {typename!r} (a pickled module's source?); only storages "
          "are supported")
    return self._storage_factory(pid[1:])


def _no_storages(pid):
  raise UnsupportedCheckpointError(f"unexpected storage {pid!r} in a legacy header pickle")


def _storage_type(value):
  if not isinstance(value, _StorageType):
    raise UnsupportedCheckpointError(f"storage type {value!r} is not a torch storage type")
  return value


def _load_zip(source, path):
  with zipfile.ZipFile(source) as archive:
    names = archive.namelist()
    pickles = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
      raise UnsupportedCheckpointError(
          f"{path}: a zip without exactly one <folder>/data.pkl ({len(pickles)} found); not a "
          "torch.save file")
    prefix = pickles[0][:-len("data.pkl")]
    byteorder = "little"
    if prefix + "byteorder" in names:
      byteorder = archive.read(prefix + "byteorder").decode("ascii").strip()
    if byteorder not in ("little", "big"):
      raise UnsupportedCheckpointError(f"{path}: byteorder record {byteorder!r}")
    storages = {}

    def factory(pid):
      storage_type, key, _, numel = pid[:4]
      key = str(key)
      if key not in storages:
        storages[key] = _Storage(_storage_type(storage_type).dtype, numel)
      return storages[key]

    obj = _Unpickler(io.BytesIO(archive.read(pickles[0])), factory).load()
    for key, storage in storages.items():
      entry = f"{prefix}data/{key}"
      if entry not in names:
        raise UnsupportedCheckpointError(f"{path}: storage {entry} is missing")
      dtype = storage.dtype.newbyteorder("<" if byteorder == "little" else ">")
      raw = archive.read(entry)
      if len(raw) % dtype.itemsize:
        raise UnsupportedCheckpointError(
            f"{path}: storage {key} has {len(raw)} bytes, not a multiple of {dtype.itemsize}")
      storage.array = np.frombuffer(raw, dtype).astype(storage.dtype, copy=False)
  return obj


def _load_legacy(f, path):
  try:
    magic = _Unpickler(f, _no_storages).load()
  except Exception as e:  # pylint: disable=broad-except
    raise UnsupportedCheckpointError(f"{path}: neither a zip nor a legacy torch file") from e
  if magic != LEGACY_MAGIC_NUMBER:
    raise UnsupportedCheckpointError(
        f"{path}: not a torch.save file (no zip, and legacy magic number {magic!r} != "
        f"{LEGACY_MAGIC_NUMBER:#x}; tar checkpoints of torch < 0.4 are not supported)")
  protocol = _Unpickler(f, _no_storages).load()
  if protocol != LEGACY_PROTOCOL_VERSION:
    raise UnsupportedCheckpointError(f"{path}: legacy protocol {protocol}, expected 1001")
  sys_info = _Unpickler(f, _no_storages).load()
  del sys_info  # Storage bytes are little-endian whatever the writer's byte order.
  roots = {}

  def factory(pid):
    storage_type, key, _, numel = pid[:4]
    view_metadata = pid[4] if len(pid) > 4 else None
    key = str(key)
    if key not in roots:
      roots[key] = _Storage(_storage_type(storage_type).dtype, numel)
    if view_metadata is not None:
      _, offset, size = view_metadata
      return _StorageView(roots[key], offset, size)
    return roots[key]

  obj = _Unpickler(f, factory).load()
  keys = _Unpickler(f, _no_storages).load()
  for key in keys:
    key = str(key)
    if key not in roots:
      raise UnsupportedCheckpointError(f"{path}: storage key {key} was never referenced")
    storage = roots[key]
    header = f.read(8)
    if len(header) != 8:
      raise UnsupportedCheckpointError(f"{path}: truncated before storage {key}")
    (numel,) = struct.unpack("<q", header)
    nbytes = numel * storage.dtype.itemsize
    raw = f.read(nbytes)
    if len(raw) != nbytes:
      raise UnsupportedCheckpointError(f"{path}: storage {key} truncated")
    storage.array = np.frombuffer(raw, storage.dtype.newbyteorder("<")).astype(
        storage.dtype, copy=False)
  return obj


def _materialize(obj):
  if isinstance(obj, _Tensor):
    return obj.materialize()
  if isinstance(obj, (_Storage, _StorageView)):
    return np.array(obj.array)
  if isinstance(obj, dict):
    out = type(obj)() if type(obj) in (dict, collections.OrderedDict) else {}
    for key, value in obj.items():
      out[key] = _materialize(value)
    return out
  if isinstance(obj, list):
    return [_materialize(v) for v in obj]
  if isinstance(obj, tuple):
    return tuple(_materialize(v) for v in obj)
  return obj


def load_torch_checkpoint(path):
  """The object `torch.save` wrote to `path`, with every tensor a numpy array.

  Dicts stay dicts (OrderedDicts stay OrderedDicts, without torch's
  `_metadata` attribute), lists, tuples and plain values stay as they are.
  Raises FileNotFoundError, or UnsupportedCheckpointError (a ValueError)
  when the file is not a readable torch checkpoint.
  """
  path = os.fspath(path)
  if not epath.Path(path).is_file():
    raise FileNotFoundError(f"path: no torch checkpoint at {path!r}")
  source = io.BytesIO(epath.Path(path).read_bytes())  # a local file or a URI (gs://...)
  is_zip = zipfile.is_zipfile(source)
  source.seek(0)
  obj = _load_zip(source, path) if is_zip else _load_legacy(source, path)
  return _materialize(obj)


def _flatten(obj, prefix, out):
  for key, value in obj.items():
    name = f"{prefix}{key}"
    if isinstance(value, dict):
      _flatten(value, name + ".", out)
    elif isinstance(value, np.ndarray):
      out[name] = value


def load_torch_state_dict(path, key=None):
  """A flat {name: numpy array} state dict from a torch.save file (no torch needed).

  Args:
    path: the `.pth` / `.pt` file, zip or legacy format.
    key: optional key (or '.'-joined path of keys) of the sub-dict holding the
      weights, e.g. 'state_dict'. When None and the top-level dict holds no
      array itself but has exactly one of 'state_dict', 'model_state_dict',
      'model', 'net', 'params', 'module' as a dict, that one is used.

  Returns:
    A dict (insertion order of the file) from parameter name to a numpy array
    (C-contiguous copies; bfloat16 as ml_dtypes.bfloat16). Nested dicts are
    flattened with '.'-joined keys (as `nn.Module.state_dict()` names them);
    leaves that are not tensors (epoch counters, strings, ...) are dropped.
    Names are kept as saved (a DataParallel 'module.' prefix is not removed).

  Raises:
    ValueError: the top-level object is not a dict, or `key` is absent.
  """
  obj = load_torch_checkpoint(path)
  if not isinstance(obj, dict):
    raise ValueError(f"path: {path!r} holds a {type(obj).__name__}, expected a dict of tensors")
  if key is not None:
    for part in key.split("."):
      if not isinstance(obj, dict) or part not in obj:
        available = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(f"key: {key!r} not in the checkpoint (top-level keys: {available})")
      obj = obj[part]
    if not isinstance(obj, dict):
      raise ValueError(f"key: {key!r} holds a {type(obj).__name__}, expected a dict")
  elif not any(isinstance(v, np.ndarray) for v in obj.values()):
    wrappers = [k for k in _WRAPPER_KEYS if isinstance(obj.get(k), dict)]
    if len(wrappers) == 1:
      obj = obj[wrappers[0]]
  out = {}
  _flatten(obj, "", out)
  return out
