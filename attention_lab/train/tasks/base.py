"""The contract between the loop and a task family, and the pieces tasks share.

The loop (train/trainer.py) owns the mesh, state placement, data feeding, jit,
checkpoints, signals, progress and metric writing; it knows no model and no
loss. A task owns everything else. A task is built from the config and the dataset's
facts (data/info.py), without reading data, so `aot` and synthetic speed runs need
neither TensorFlow nor a prepared dataset. The loop calls, in order:

  task = TaskClass(config, env)               # models, optimizers, schedule: no data read
  state = task.from_pretrained(jit(task.init_state, out_shardings)())
                                            # or an orbax restore into
                                            # jax.eval_shape(task.init_state)
  task.batch_spec() -> {name: ShapeDtypeStruct}  # global batch shapes (aot, synthetic)
  for batch in task.train_batches(start_step):   # this process's numpy batches (data/)
    state, metrics = jit(task.train_step)(state, env.global_batch(batch))
  task.evaluate(state) -> {"eval_...": float}    # whole-set, every eval_every_steps
  task.image_summaries(state) -> {name: images}  # pictures, at every evaluation
  task.export(state, split, out) -> line         # optional: benchmark files (predict)

The runs a task depends on (the GAN's digits classifier, a pretrained backbone) are
resolved by the entry point before the task exists (train/dependencies.py) and reach it
through `env.dependencies`; no task trains another run.

`state` is any pytree of arrays (dicts of params / BatchNorm statistics /
optimizer states / PRNG keys) with a scalar int32 "step"; `metrics` is a clu
`metrics.Collection` (averaged by the loop over each log interval). A GAN fits
without touching the loop: its state holds {"generator": ..., "discriminator":
..., "ema": ...}, its train_step runs the D and G updates, its evaluate
generates samples and scores them. Tasks are looked up by module name:
`config.task = "segmentation"` is `attention_lab/train/tasks/segmentation.py`,
whose `TASK` attribute is the class.
"""

import abc
import dataclasses
from typing import Any, Callable, Iterable, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from clu import metrics
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from attention_lab import models
from attention_lab.checkpoints import backbone_weights
from attention_lab.train import microbatch, optim

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
Batch = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Environment:
  """What the loop tells a task: the mesh, the workdir, this process's batch size, and the
  runs it depends on (train/dependencies.py: "init_from" -> a weights path, "classifier"
  -> (model, config))."""

  mesh: jax.sharding.Mesh
  workdir: str
  local_batch_size: int
  dependencies: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def data_sharding(self) -> NamedSharding:
    return NamedSharding(self.mesh, P("data"))

  def global_batch(self, batch: Batch) -> dict[str, jax.Array]:
    """This process's numpy batch → global arrays split over the mesh's "data" axis."""
    return {k: jax.make_array_from_process_local_data(self.data_sharding, v)
            for k, v in batch.items()}


class Task(abc.ABC):
  """Base class of a task family; see the module docstring for the protocol."""

  headline = "loss"  # the evaluation metric a person watches: eval_<headline>

  def __init__(self, config, env: Environment):
    self.config, self.env = config, env
    self._jit_eval_step = None

  # The loop needs these from every task.
  total_steps: int

  @abc.abstractmethod
  def init_state(self) -> Any:
    """The initial state pytree; pure, traced under jit with the state's shardings."""

  @abc.abstractmethod
  def train_step(self, state, batch) -> tuple[Any, metrics.Collection]:
    """(state, global batch) → (new state, clu Collection); jitted, `state` donated."""

  @abc.abstractmethod
  def train_batches(self, start_step: int) -> Iterator[Batch]:
    """Endless iterator of this process's numpy batches from `start_step` on (exact resume)."""

  @abc.abstractmethod
  def evaluate(self, state) -> dict[str, float]:
    """Whole-set evaluation → {"eval_<name>": float}, the same on every process."""

  # Shared by the tasks that train one network on a dataset with a known size.
  def set_schedule(self, num_train_examples: int) -> optax.Schedule:
    """Sets `steps_per_epoch`, `total_steps` (`config.num_train_steps`, or 0 for
    `num_epochs` × steps per epoch) and `schedule` (`config.optimizer`); returns it."""
    config = self.config
    self.steps_per_epoch = max(1, num_train_examples // config.batch_size)
    self.total_steps = config.num_train_steps or int(
        config.num_epochs * self.steps_per_epoch)
    self.schedule = optim.make_schedule(
        config.optimizer, steps_per_epoch=self.steps_per_epoch, total_steps=self.total_steps)
    return self.schedule

  # Optional.
  def from_pretrained(self, state):
    """Called once on a fresh start (no checkpoint in the workdir), outside jit: returns
    `state` with weights from elsewhere, in its shardings. Default: the weights of
    `config.init_from` if set (a torchvision ResNet .pth, our classification checkpoint:
    workdir, checkpoints dir or step dir; a classification config is trained first by
    train/dependencies.py, which hands its workdir over as `env.dependencies["init_from"]`),
    whose backbone replaces the state's (`config.init_scope` "model": the whole model,
    from a run of the same model); else `state`."""
    path = self.env.dependencies.get("init_from") or self.config.init_from
    if not path or self.config.dataset.synthetic:  # a speed run: weights do not matter
      return state
    if path.partition(":")[0].endswith(".py"):
      raise ValueError(f"init_from = {path!r}: a config file is trained first by the entry "
                       "point (train/dependencies.py), which this task was not given")
    return backbone_weights.load_into(state, path,
                                      scope=self.config.init_scope)

  def image_summaries(self, state) -> dict[str, np.ndarray]:
    """Pictures to write at each evaluation: name → uint8 (N, H, W, 3) images."""
    del state
    return {}

  def learning_rates(self, step: int) -> dict[str, float]:
    """Scalars to log with the train metrics. Default: {"learning_rate"} of the step just
    taken under `self.schedule` (set by `set_schedule`); {} without one."""
    schedule = getattr(self, "schedule", None)
    return {} if schedule is None else {"learning_rate": float(schedule(step - 1))}

  @abc.abstractmethod
  def batch_spec(self) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes and dtypes of one global train batch, from the config and the dataset's
    facts (`aot` compiles the train step from them; synthetic runs are fed batches of
    them)."""

  def export(self, state, split: str, out: str) -> str:
    """Writes the predictions of `split` as the task's benchmark files under `out` (a
    path or URI; formats in evaluation/submission.py) and returns a summary line; tasks
    without a format raise ValueError."""
    del state, split, out
    raise ValueError(f"task {type(self).__name__} has no export format")

  # Shared helper for tasks whose evaluation is a sum over eval batches.
  def evaluate_batches(self, state, eval_step: Callable, batches: Iterable[Batch]
                       ) -> metrics.Collection:
    """Runs jit(eval_step)(state, global batch) over `batches`, merging the collections."""
    if self._jit_eval_step is None:
      self._jit_eval_step = jax.jit(eval_step)
    total = None
    for batch in batches:
      values = self._jit_eval_step(state, self.env.global_batch(batch))
      total = values if total is None else total.merge(values)
    if total is None:
      raise ValueError("the evaluation split yielded no batches")
    return total


def model_dtype(name: str):
  """`model.dtype` by name ("float32", "bfloat16") → the jnp dtype."""
  if name not in DTYPES:
    raise ValueError(f"model.dtype must be one of {sorted(DTYPES)}, got {name!r}")
  return DTYPES[name]


def create_model(model_config, **kwargs) -> nnx.Module:
  """`models.create(config.model.name, **config.model fields, **kwargs)`, dtype by name."""
  overrides = {k: v for k, v in model_config.items() if k != "name"}
  if "dtype" in overrides:
    overrides["dtype"] = model_dtype(overrides["dtype"])
  overrides.update(kwargs)
  return models.create(model_config.name, **overrides)


class TrainableModel:
  """One NNX model and its optax optimizer as the pure pieces a jitted step needs.

  `bn_group_size` (config.bn_group_size): examples per BatchNorm statistics group in
  training, as the papers' per-GPU workers had them; 0 the whole (micro-)batch.
  Its state is {"params", "non_params", "opt_state"}: the non-parameter variables are
  BatchNorm statistics, RNG keys and counters of dropout or Hamburger bases. The graph definitions come from `nnx.eval_shape`, so building one
  allocates nothing; `init()` is pure and runs under the loop's jit.
  """

  def __init__(self, build: Callable[[nnx.Rngs], nnx.Module], tx: optax.GradientTransformation,
               seed: int, bn_group_size: int = 0):
    self.build, self.tx, self.seed = build, tx, seed
    abstract = nnx.eval_shape(lambda: build(nnx.Rngs(seed)))
    if bn_group_size:  # BatchNorm statistics per group of examples (layers/batch_norm.py)
      abstract.set_attributes(bn_group_size=bn_group_size, raise_if_not_found=False)
    abstract.eval()
    self.eval_graphdef = nnx.graphdef(abstract)
    abstract.train()
    self.train_graphdef = nnx.graphdef(abstract)

  def init(self) -> dict[str, Any]:
    model = self.build(nnx.Rngs(self.seed))
    model.train()
    _, params, non_params = nnx.split(model, nnx.Param, ...)
    return {"params": params, "non_params": non_params, "opt_state": self.tx.init(params)}

  def model(self, state, *, train: bool) -> nnx.Module:
    """The module with `state`'s variables (a copy: its updates do not touch `state`)."""
    graphdef = self.train_graphdef if train else self.eval_graphdef
    return nnx.merge(graphdef, state["params"], state["non_params"], copy=True)

  def gradients(self, state, batch, loss_fn: Callable, microbatches: int = 1):
    """(grads, (non_params, metrics)) of `loss_fn(model, batch) -> (mean loss, metrics)` for the
    model in training mode: over the whole batch, or accumulated over `microbatches`
    pieces in one scan (train/microbatch.py; BatchNorm statistics updated per piece, as
    the papers' workers did per step)."""

    def grad_fn(params, variables, batch):  # variables: the non-parameter ones
      def objective(params):
        model = self.model({"params": params, "non_params": variables}, train=True)
        loss, values = loss_fn(model, batch)
        return loss, (non_params(model), values)
      return jax.grad(objective, has_aux=True)(params)

    return microbatch.accumulate(grad_fn, state["params"], state["non_params"], batch,
                                 microbatches)

  def update(self, state, grads, non_params) -> dict[str, Any]:
    """One optimizer step on `grads`; `non_params` replaces the non-parameter variables."""
    updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
    return {"params": optax.apply_updates(state["params"], updates),
            "non_params": non_params, "opt_state": opt_state}


def non_params(model: nnx.Module):
  """The non-parameter variables of a model after a forward pass (new BN statistics, RNGs)."""
  return nnx.state(model, nnx.Not(nnx.Param))


def masked_mean(values, mask):
  """Mean of `values` over examples where `mask` is true (padding excluded)."""
  mask = jnp.broadcast_to(mask, values.shape)
  return jnp.sum(values * mask) / jnp.maximum(jnp.sum(mask), 1)
