"""Attention weights recorded by the layers themselves, on request.

Every attending layer (GlobalAttention, AugmentedConv, NonLocal, SelfAttention,
Hamburger) has a `record_attention` attribute, False by default. Off, a layer
computes and stores nothing extra: its traced function, and so the jitted
train step, is the one without recording. On, the layer also computes, from
its own q and k (never through the operator, whose contract is unchanged), the
weights by which its values enter its output, and sows them as an
`nnx.Intermediate` named `WEIGHTS` (Hamburger also sows `BASES`), which
`nnx.capture` collects.

Layout, float32: (B, heads, *query grid, *key grid), so that per head
out[q] = Σ_k weights[q, k]·v[k] with v the values the operator receives
(before any output projection); the KAO operators attend to the ΣS summary
tokens instead of a key grid, (B, heads, *grid, ΣS); Hamburger's codes are the
"attention" of the tokens to its R bases, (B, groups, H, W, R).

`attention_weights(model, *args)` runs one call with recording on and returns
the output and the recorded values per layer path. It works eagerly and with
`nnx.jit` inside the call.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

ATTRIBUTE = "record_attention"
WEIGHTS = "attention_weights"
BASES = "bases"


def sow_if_recording(module: nnx.Module, name: str, compute) -> None:
  """Sows `compute()` as `name` when `module.record_attention` is on (else computes nothing)."""
  if getattr(module, ATTRIBUTE):
    module.sow(nnx.Intermediate, name, compute())


def single_head_weights(q, k, *, scale: float, normalization: str = "softmax") -> jax.Array:
  """Float32 weights (B, 1, *Sq, *Sk) of one-head attention from q (B, *Sq, D), k (B, *Sk, D):
  softmax over keys of scale·q·k, or (normalization="mean") scale·q·k / Nk."""
  flat = lambda t: t.reshape(t.shape[0], -1, t.shape[-1]).astype(jnp.float32)
  logits = scale * jnp.einsum("bqd,bkd->bqk", flat(q), flat(k))
  if normalization == "softmax":
    weights = jax.nn.softmax(logits, axis=-1)
  else:
    weights = logits / math.prod(k.shape[1:-1])
  return weights.reshape(q.shape[0], 1, *q.shape[1:-1], *k.shape[1:-1])


def recording_layers(model: nnx.Module) -> list[tuple[str, nnx.Module]]:
  """[(path, layer)] of the modules of `model` that can record, in `nnx.iter_modules` order."""
  return [("/".join(map(str, path)) or "model", m) for path, m in nnx.iter_modules(model)
          if hasattr(m, ATTRIBUTE)]


def attention_weights(model: nnx.Module, *args, **kwargs) -> tuple[Any, dict[str, dict]]:
  """(model(*args, **kwargs), {layer path: {name: (value per call, ...)}}) with recording on.

  Recording is switched off again afterwards (also on error), and the model keeps no
  recorded value: its state and graph are as before the call. Paths are those of
  `recording_layers`, in that order; a layer that was not called is absent.
  """
  layers = recording_layers(model)
  for _, layer in layers:
    setattr(layer, ATTRIBUTE, True)
  try:
    out, recorded = nnx.capture(model, nnx.Intermediate)(*args, **kwargs)
  finally:
    for _, layer in layers:
      setattr(layer, ATTRIBUTE, False)
  by_layer = {}
  for path, variable in nnx.to_flat_state(recorded):
    by_layer.setdefault("/".join(map(str, path[:-1])) or "model", {})[path[-1]] = (
        variable.get_value())
  order = [path for path, _ in layers]
  return out, {path: by_layer[path] for path in order if path in by_layer}
