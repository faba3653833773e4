"""The train state on a mesh: the mesh, the state's shardings, the jitted train step, and
the state created or restored straight into its shardings (a `StateLayout`). The loop,
perf, `aot` and `predict` all build it here.

The state is a pytree of arrays placed with NamedSharding over a `jax.sharding.Mesh`
with one "data" axis (replicated, or parameters split along their largest divisible axis
with `mesh.param_sharding="fsdp"`); it is created by a jitted init with `out_shardings`,
or restored by orbax straight into those shardings, so every process holds only its own
shards. Batches are global arrays split over "data". XLA inserts the cross-device
reductions (gradients, BatchNorm statistics over the global batch), so the loss does not
depend on the device count. Typed PRNG keys are saved as their raw uint32 key data.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from attention_lab.train import checkpointing


def make_mesh(config, devices=None) -> jax.sharding.Mesh:
  """A 1-D ("data",) mesh over `config.mesh.num_devices` of `devices` (default
  `jax.devices()`; -1: all of them)."""
  devices = jax.devices() if devices is None else list(devices)
  n = config.mesh.num_devices
  if n != -1 and not 0 < n <= len(devices):
    raise ValueError(f"mesh.num_devices = {n}: must be -1 (all) or 1..{len(devices)}")
  devices = devices if n == -1 else devices[:n]
  return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)


def check_batch(config, mesh) -> int:
  """This process's share of `config.batch_size`; ValueError unless the devices of the mesh,
  the processes and `microbatches` divide it, and `bn_group_size` divides each device's
  share of a micro-batch (a statistics group never spans devices or micro-batches)."""
  for count, what in ((mesh.size, "the number of devices in the mesh"),
                      (jax.process_count(), "the process count"),
                      (config.microbatches, "microbatches")):
    if not isinstance(count, int) or count < 1 or config.batch_size % count:
      raise ValueError(f"batch_size = {config.batch_size}: must be divisible by {what} "
                       f"({count})")
  per_device = config.batch_size // config.microbatches // mesh.size
  group = config.bn_group_size
  if group < 0 or (group and per_device % group):
    raise ValueError(f"bn_group_size = {group}: must be 0 (the whole batch) or divide each "
                     f"device's share of a micro-batch (batch_size {config.batch_size} / "
                     f"microbatches {config.microbatches} / {mesh.size} devices = "
                     f"{per_device})")
  return config.batch_size // jax.process_count()


def state_shardings(state, mesh, rule: str):
  """Replicated state, or "fsdp": each array split over "data" along its largest divisible
  axis."""
  if rule not in ("replicated", "fsdp"):
    raise ValueError(f"mesh.param_sharding must be 'replicated' or 'fsdp', got {rule!r}")
  size = mesh.shape["data"]

  def spec(x):
    if rule == "fsdp" and getattr(x, "ndim", 0) >= 1:
      axes = [a for a in np.argsort(x.shape)[::-1] if x.shape[a] % size == 0]
      if axes:
        return NamedSharding(mesh, P(*[("data" if a == axes[0] else None) for a in range(x.ndim)]))
    return NamedSharding(mesh, P())

  return jax.tree.map(spec, state)


def jit_train_step(task, shardings):
  """The jitted train step: `state` donated, the new state in its shardings. The loop and
  `attention_lab.aot` compile exactly this."""
  return jax.jit(task.train_step, donate_argnums=0, out_shardings=(shardings, None))


def abstract_arrays(abstract, shardings):
  """ShapeDtypeStructs of `abstract` carrying `shardings` (what `aot` and perf lower with)."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      abstract, shardings)


def is_key(x) -> bool:
  """A typed PRNG key array, or its abstract ShapeDtypeStruct."""
  return jnp.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key)


def as_saved(state):
  """`state` as checkpoints hold it: typed PRNG keys become their raw uint32 key data."""
  return jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, state)


def from_saved(restored, like):
  """Undoes `as_saved`, given the (abstract) state it came from."""
  return jax.tree.map(
      lambda r, x: jax.random.wrap_key_data(r, impl=x.dtype._impl) if is_key(x) else r,  # pylint: disable=protected-access
      restored, like)


def restore_target(abstract, shardings):
  """What orbax restores `abstract` into: each array in its sharding, a key as its raw key
  data, replicated over the same mesh."""

  def target(like, sharding):
    if is_key(like):
      data = jax.eval_shape(jax.random.key_data, like)
      return jax.ShapeDtypeStruct(data.shape, data.dtype,
                                  sharding=NamedSharding(sharding.mesh, P()))
    return jax.ShapeDtypeStruct(like.shape, like.dtype, sharding=sharding)

  return jax.tree.map(target, abstract, shardings)


class StateLayout:
  """The layout of a task's state on `mesh`: its shapes (`abstract`, ShapeDtypeStructs),
  its `shardings`, the jitted `train_step` that keeps them, and `init()` or
  `restore(checkpoints)` to create the arrays in them."""

  def __init__(self, task, mesh, param_sharding: str):
    self.task, self.mesh = task, mesh
    self.abstract = jax.eval_shape(task.init_state)
    self.shardings = state_shardings(self.abstract, mesh, param_sharding)
    self.train_step = jit_train_step(task, self.shardings)

  def init(self):
    """The task's initial state (pretrained weights in, `task.from_pretrained`)."""
    return self.task.from_pretrained(jax.jit(self.task.init_state,
                                             out_shardings=self.shardings)())

  def restore(self, checkpoints: checkpointing.Checkpoints, step: int | None = None):
    """(state, step) of the newest step that restores (or `step`); None without one."""
    target = restore_target(self.abstract, self.shardings)
    restored = (checkpoints.restore(target) if step is None
                else checkpoints.restore_step(step, target))
    if restored is None:
      return None
    return from_saved(restored[0], self.abstract), restored[1]
