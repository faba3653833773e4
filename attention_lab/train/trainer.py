"""The generic train loop: NNX model + optax, jit over a device mesh, clu, orbax.

The model is split once into (graphdef, params, rest): `rest` holds every
non-parameter variable (BatchNorm statistics, RNG keys and counters of dropout
or Hamburger bases). The train and eval steps are pure jitted functions of a
state dict {step, params, rest, opt_state} and a batch; sharding comes from
the arrays: the state is placed with NamedSharding over a `jax.sharding.Mesh`
with one "data" axis (replicated, or parameters split along their largest
divisible axis with `mesh.param_sharding="fsdp"`), batches are global arrays
split over "data", assembled per process with
`jax.make_array_from_process_local_data`. XLA inserts the cross-device
reductions (gradients, BatchNorm statistics over the global batch), so the
loss does not depend on the device count.

A task object (config.task, a key of TASKS) owns the loss and the metrics:
`loss_and_metrics(outputs, batch) -> (loss, clu metrics)` and a `metrics`
collection class; Classification is the first. Segmentation or restoration
tasks add an entry with their own loss and metrics and reuse the loop.
"""

import os
import signal
import tempfile

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from clu import metric_writers, metrics, parameter_overview, periodic_actions
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from attention_lab import models
from attention_lab.data import pipeline
from attention_lab.train import optim

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@flax.struct.dataclass
class ClassificationMetrics(metrics.Collection):
  loss: metrics.Average.from_output("loss")
  top1: metrics.Average.from_output("top1")
  top5: metrics.Average.from_output("top5")


class Classification:
  """Softmax cross-entropy with label smoothing; top-1 / top-5 accuracy."""

  metrics = ClassificationMetrics

  def __init__(self, num_classes: int, label_smoothing: float = 0.0):
    self.num_classes, self.label_smoothing = num_classes, label_smoothing

  def loss_and_metrics(self, logits, batch):
    labels = jax.nn.one_hot(batch["label"], self.num_classes)
    if self.label_smoothing:
      labels = optax.smooth_labels(labels, self.label_smoothing)
    per_example = optax.softmax_cross_entropy(logits.astype(jnp.float32), labels)
    mask = batch.get("mask", jnp.ones_like(per_example, bool))
    loss = jnp.sum(per_example * mask) / jnp.maximum(jnp.sum(mask), 1)
    top5 = jax.lax.top_k(logits, min(5, self.num_classes))[1]
    values = self.metrics.single_from_model_output(
        loss=per_example, top1=jnp.argmax(logits, -1) == batch["label"],
        top5=jnp.any(top5 == batch["label"][:, None], axis=-1), mask=mask)
    return loss, values


TASKS = {"classification": Classification}


def make_mesh(config) -> jax.sharding.Mesh:
  """A 1-D ("data",) mesh over `config.mesh.num_devices` devices (-1: all)."""
  n = config.mesh.num_devices
  devices = jax.devices() if n == -1 else jax.devices()[:n]
  return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)


def state_shardings(state, mesh, rule: str):
  """Replicated state, or "fsdp": each array split over "data" along its largest divisible axis."""
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


def _check_workdir(workdir: str) -> None:
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise ValueError(f"workdir {workdir!r} cannot be written: {e}") from None


def _is_key(x):
  return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _storable(state):
  """Typed PRNG keys become raw uint32 key data for orbax."""
  return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, state)


def _unstorable(restored, like):
  return jax.tree.map(
      lambda r, x: jax.random.wrap_key_data(r, impl=jax.random.key_impl(x)) if _is_key(x) else r,
      restored, like)


class Trainer:
  """Builds model, optimizer, mesh, data and checkpoints from a config; `run()` trains."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str):
    self.config, self.workdir = config, workdir
    _check_workdir(workdir)
    self.mesh = make_mesh(config)
    num_devices = self.mesh.size
    if config.batch_size % num_devices:
      raise ValueError(
          f"batch_size (global, {config.batch_size}) must be divisible by the number of "
          f"devices in the mesh ({num_devices})")
    if config.batch_size % jax.process_count():
      raise ValueError(f"batch_size ({config.batch_size}) must be divisible by the process "
                       f"count ({jax.process_count()})")
    self.local_batch = config.batch_size // jax.process_count()
    self.info = pipeline.dataset_info(config)
    self.steps_per_epoch = max(1, self.info.num_train_examples // config.batch_size)
    self.total_steps = config.get("num_train_steps") or int(
        config.num_epochs * self.steps_per_epoch)

    overrides = {k: v for k, v in config.model.items() if k != "name"}
    if "dtype" in overrides:
      if overrides["dtype"] not in DTYPES:
        raise ValueError(f"model.dtype must be one of {sorted(DTYPES)}, got {overrides['dtype']!r}")
      overrides["dtype"] = DTYPES[overrides["dtype"]]
    model = models.create(config.model.name, num_classes=self.info.num_classes,
                          rngs=nnx.Rngs(config.seed), **overrides)
    model.eval()
    self.eval_graphdef = nnx.graphdef(model)
    model.train()
    self.train_graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    parameter_overview.log_parameter_overview(nnx.to_pure_dict(params))

    task = config.get("task", "classification")
    if task not in TASKS:
      raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
    self.task = TASKS[task](self.info.num_classes, config.get("label_smoothing", 0.0))
    self.schedule = optim.make_schedule(
        config.optimizer, steps_per_epoch=self.steps_per_epoch, total_steps=self.total_steps)
    self.tx = optim.make_optimizer(config.optimizer, self.schedule)
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "rest": rest,
             "opt_state": self.tx.init(params)}
    self.shardings = state_shardings(state, self.mesh, config.mesh.param_sharding)
    self.state = jax.device_put(state, self.shardings)
    self.data_sharding = NamedSharding(self.mesh, P("data"))
    self.train_step = jax.jit(self._train_step, donate_argnums=0,
                              out_shardings=(self.shardings, None))
    self.eval_step = jax.jit(self._eval_step)

    self.checkpoints = ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=config.keep_checkpoints,
            save_interval_steps=config.checkpoint_every_steps))
    latest = self.checkpoints.latest_step()
    if latest is not None:
      abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _storable(self.state))
      restored = self.checkpoints.restore(latest, args=ocp.args.StandardRestore(abstract))
      self.state = _unstorable(restored, self.state)
      logging.info("Resumed from %s at step %d", self.checkpoints.directory, latest)

  def _train_step(self, state, batch):
    def loss_fn(params, rest):
      model = nnx.merge(self.train_graphdef, params, rest, copy=True)
      loss, values = self.task.loss_and_metrics(model(batch["image"]), batch)
      return loss, (nnx.state(model, nnx.Not(nnx.Param)), values)

    grads, (rest, values) = jax.grad(loss_fn, has_aux=True)(state["params"], state["rest"])
    updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    new_state = {"step": state["step"] + 1, "params": params, "rest": rest,
                 "opt_state": opt_state}
    return new_state, values

  def _eval_step(self, state, batch):
    model = nnx.merge(self.eval_graphdef, state["params"], state["rest"])
    return self.task.loss_and_metrics(model(batch["image"]), batch)[1]

  def global_batch(self, batch):
    """This process's numpy batch → global arrays sharded over the mesh's "data" axis."""
    return {k: jax.make_array_from_process_local_data(self.data_sharding, v)
            for k, v in batch.items()}

  def evaluate(self) -> dict[str, float]:
    total = None
    for batch in pipeline.eval_batches(self.config, local_batch_size=self.local_batch):
      values = self.eval_step(self.state, self.global_batch(batch))
      total = values if total is None else total.merge(values)
    return {f"eval_{k}": float(v) for k, v in total.compute().items()}

  def save(self, *, force: bool = False) -> None:
    step = int(self.state["step"])
    self.checkpoints.save(step, args=ocp.args.StandardSave(_storable(self.state)), force=force)

  def run(self, until_step: int | None = None) -> dict[str, float]:
    """Trains from the workdir's last checkpoint to `total_steps`, or only to `until_step`
    (a session budget: the schedule still spans `total_steps`); saves and returns the last
    metrics."""
    config = self.config
    start = int(self.state["step"])
    last = self.total_steps if until_step is None else min(until_step, self.total_steps)
    if start >= last:  # already trained (e.g. a re-run of a finished workdir): just evaluate
      return self.evaluate()
    writer = metric_writers.create_default_writer(
        self.workdir, just_logging=jax.process_index() > 0)
    report = periodic_actions.ReportProgress(
        num_train_steps=self.total_steps, writer=writer, every_steps=config.log_every_steps,
        every_secs=None)
    stop = {"requested": False}
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))
    data = pipeline.train_iterator(config, local_batch_size=self.local_batch, start_step=start)
    train_metrics, summary = None, {}
    try:
      for step in range(start + 1, last + 1):
        self.state, values = self.train_step(self.state, self.global_batch(next(data)))
        train_metrics = values if train_metrics is None else train_metrics.merge(values)
        report(step)
        if step % config.log_every_steps == 0 or step == self.total_steps:
          summary = {f"train_{k}": float(v) for k, v in train_metrics.compute().items()}
          summary["learning_rate"] = float(self.schedule(step - 1))
          writer.write_scalars(step, summary)
          train_metrics = None
        if step % config.eval_every_steps == 0 or step == self.total_steps:
          evaluation = self.evaluate()
          writer.write_scalars(step, evaluation)
          summary.update(evaluation)
        if stop["requested"]:
          logging.warning("SIGTERM: saving step %d and exiting", step)
        self.save(force=step == last or stop["requested"])
        if stop["requested"]:
          break
    finally:
      self.checkpoints.wait_until_finished()
      signal.signal(signal.SIGTERM, previous)
      writer.flush()
    return summary
