"""Gradient accumulation over micro-batches inside one jitted step.

The papers trained with global batches that fit their clusters (SAO: 640 images
on 8 GPUs, KAO: 512, AA: 1024-4096). `accumulate` runs such a batch as k
micro-batches under `jax.lax.scan`, so only one micro-batch's activations are
alive at a time on a GPU or TPU, and returns what one pass over the whole batch
would: the gradient of the mean loss and the metrics of every example. Non-parameter
state (BatchNorm running statistics, RNG counters) is threaded through the
micro-batches in order, as the papers' workers updated it once per step on
their own share. This is MaxText's `gradient_accumulation_steps` and t5x's
`num_microbatches`; unlike optax.MultiSteps, the optimizer is applied once per
step on the averaged gradient, inside the same step.

On the CPU, k ≤ UNROLLED_ON_CPU micro-batches run unrolled (the scan lowered as
straight-line code): XLA:CPU runs the convolutions of a scan's body many times slower
than the same code unrolled, which takes about one pass's memory. On accelerators the
scan stays: unrolled, XLA:TPU kept every micro-batch's activations alive at once
(both in experiments/results/microbatches_cpu.md).

A task's train_step:

    def loss_fn(params, non_params, batch):
      model = net.model({"params": params, "non_params": non_params}, train=True)
      loss, values = loss_and_metrics(model(batch["image"]), batch)
      return loss, (base.non_params(model), values)

    grads, (non_params, values) = microbatch.accumulate(
        jax.grad(loss_fn, has_aux=True), state["params"], state["non_params"], batch, k)
"""

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from clu import metrics


UNROLLED_ON_CPU = 8  # the most micro-batches unrolled on the CPU (compile time grows with k)


def _platform(batch) -> str:
  """The platform `batch` is placed on as traced (its abstract mesh), else JAX's default."""
  for leaf in jax.tree.leaves(batch):
    mesh = getattr(getattr(jax.typeof(leaf), "sharding", None), "mesh", None)
    device = getattr(mesh, "abstract_device", None)
    if device is not None:
      return device.platform
  return jax.default_backend()


def _check(batch, microbatches):
  if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
    raise ValueError(f"microbatches must be a positive int, got {microbatches!r}")
  for path, leaf in jax.tree_util.tree_flatten_with_path(batch)[0]:
    if jnp.ndim(leaf) == 0 or leaf.shape[0] % microbatches:
      raise ValueError(
          f"microbatches ({microbatches}) must divide the batch size: batch"
          f"{jax.tree_util.keystr(path)} has shape {jnp.shape(leaf)}")


def split(batch, microbatches: int):
  """Every leaf (B, ...) → (k, B/k, ...), micro-batch i holding examples i, i+k, i+2k, ...

  Strided, not contiguous: with the batch sharded over devices on axis 0, each
  device's share splits evenly into the k micro-batches in place, so every
  device works on every micro-batch and no example moves between devices.
  """
  _check(batch, microbatches)
  return jax.tree.map(lambda x: jnp.moveaxis(
      x.reshape(x.shape[0] // microbatches, microbatches, *x.shape[1:]), 1, 0), batch)


def _is_metric(x) -> bool:
  return isinstance(x, (metrics.Collection, metrics.Metric))


def _combine(stacked, microbatches: int):
  """Per-micro-batch outputs (leading axis k) → the whole batch's: clu metrics merged,
  every other leaf averaged (a mean over equal micro-batches is the batch mean)."""
  def one(x):
    if not _is_metric(x):
      return jnp.mean(x, axis=0)
    parts = [jax.tree.map(lambda a, i=i: a[i], x) for i in range(microbatches)]
    return functools.reduce(lambda a, b: a.merge(b), parts)
  return jax.tree.map(one, stacked, is_leaf=_is_metric)


def accumulate(grad_fn: Callable, params, carry, batch, microbatches: int,
               unroll: bool | None = None) -> tuple[Any, tuple[Any, Any]]:
  """grad_fn's (grads, (carry, out)) for the whole batch, run as `microbatches` pieces.

  Args:
    grad_fn: (params, carry, batch) → (grads, (carry, out)), e.g.
      `jax.grad(loss_fn, has_aux=True)` of a mean loss. `carry` is the
      non-parameter state (model variables other than nnx.Param); `out` holds
      clu metrics (a Collection or Metric, merged as for the whole batch) and
      any other leaves, which are averaged over micro-batches (so they must be
      batch means, not per-example values).
    params: differentiated parameters (the same for every micro-batch).
    carry: state threaded micro-batch to micro-batch, in `split`'s order.
    batch: pytree of (B, ...) arrays; B divisible by `microbatches`.
    microbatches: k ≥ 1. k = 1 calls grad_fn once, the computation without
      micro-batches; k > 1 scans over `split(batch, k)`.
    unroll: whether the scan is lowered unrolled; None: on the CPU for
      k ≤ UNROLLED_ON_CPU, not elsewhere (see the module docstring).

  Returns:
    (the mean of the k gradients, which is the gradient of the whole batch's
    mean loss when every micro-batch has B/k examples of equal weight,
    (the carry after the last micro-batch, the combined outputs)).
  """
  _check(batch, microbatches)
  if microbatches == 1:
    return grad_fn(params, carry, batch)

  def body(state, micro):
    total, carry = state
    grads, (carry, out) = grad_fn(params, carry, micro)
    return (jax.tree.map(jnp.add, total, grads), carry), out

  zeros = jax.tree.map(jnp.zeros_like, params)
  if unroll is None:
    unroll = microbatches <= UNROLLED_ON_CPU and _platform(batch) == "cpu"
  (total, carry), outs = jax.lax.scan(body, (zeros, carry), split(batch, microbatches),
                                      unroll=bool(unroll))
  grads = jax.tree.map(lambda g: g / microbatches, total)
  return grads, (carry, _combine(outs, microbatches))
