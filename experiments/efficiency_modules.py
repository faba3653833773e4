"""Modules the efficiency tables need that attention_lab.layers does not provide.

- `DoubleAttention`: the A² block (Chen et al., A²-Nets, NeurIPS 2018), a row
  of Ham Table 3.
The Refined-SA tables' SAGAN / ISAGAN / SGAN are the registry's
`sagan_generator` / `sagan_discriminator` (experiments/efficiency_gan.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments import measure


class DoubleAttention(nnx.Module):
  """A² block: gather global descriptors, distribute them back (A²-Nets Eq. 3-5).

  A = φ(x) (m features), B = θ(x) (n attention maps, softmax over positions),
  V = ρ(x) (n attention vectors, softmax over the n maps); G = Aᵀ softmax(B)
  (m×n global descriptors), Z_i = G softmax(V_i); out = x + W_out Z. All maps
  are 1×1 convolutions with bias. Time O(HW·(C·(m+2n) + m·C + 2·m·n)), memory
  O(HW·(m+2n)); no HW×HW matrix. With C = m = n = 512 at 128² this is Ham
  Table 3's A² row: 1.05M parameters, 25.8G multiply-adds.
  """

  def __init__(self, channels: int, features: int, maps: int, *, dtype=None, rngs: nnx.Rngs):
    conv = lambda i, o: nnx.Conv(i, o, (1, 1), kernel_init=_INIT, dtype=dtype, rngs=rngs)
    self.phi, self.theta, self.rho = conv(channels, features), conv(channels, maps), conv(
        channels, maps)
    self.out = conv(features, channels)

  def __call__(self, x):
    b, h, w, _ = x.shape
    a = self.phi(x).reshape(b, h * w, -1)                      # (B, N, m)
    gather = jax.nn.softmax(self.theta(x).reshape(b, h * w, -1), axis=1)   # over positions
    distribute = jax.nn.softmax(self.rho(x).reshape(b, h * w, -1), axis=2)  # over maps
    g = jnp.einsum("bnm,bnk->bmk", a, gather)                  # (B, m, n)
    z = jnp.einsum("bmk,bnk->bnm", g, distribute)              # (B, N, m)
    return x + self.out(z.reshape(b, h, w, -1))


def _INIT(key, shape, dtype=jnp.float32):  # pylint: disable=invalid-name
  """N(0, 0.02) kernels (DCGAN/SAGAN practice), drawn by numpy from the key's bits.

  Numpy sampling needs no XLA compilation per kernel shape (each jax.random
  initialiser compiles separately, ~1 s apiece on a small CPU), which keeps the
  efficiency tables' tiny presets fast. Deterministic for a given key.
  """
  seed = int(np.asarray(jax.random.key_data(key)).ravel()[-1])
  return jnp.asarray(np.random.default_rng(seed).normal(0.0, 0.02, shape), dtype)


# Builders of the Ham Table 3 rows (experiments/efficiency.py, experiments/performance_goals.py).


def build_module(name: str, channels: int, config):
  """The context modules of Ham Table 3 at `channels` input channels."""
  from attention_lab import layers  # pylint: disable=g-import-not-at-top
  rngs = nnx.Rngs(0)
  if name == "sa":
    return layers.GlobalAttention(channels, "softmax", num_heads=1, project="qkv",
                                  out_features=channels, rngs=rngs)
  if name == "a2":
    return DoubleAttention(channels, config.a2_features, config.a2_features, rngs=rngs)
  if name in ("ham_cd", "ham_nmf"):
    return layers.Hamburger(channels, ham=name[4:], dim=config.ham_dim, rank=config.ham_rank,
                            train_steps=config.ham_steps, eval_steps=config.ham_steps,
                            rngs=rngs)
  raise ValueError(f"unknown module {name!r}")


def ham_flops(name, channels, side, config, program: str) -> float:
  """XLA flops of a Hamburger with every solver step counted (loops unrolled for counting)."""
  model = build_module(name, channels, config)
  with measure.unrolled_loops():
    return module_program(model, program, config.batch, side, channels)[1]["xla_flops"]


def module_program(model, program, batch, side, channels):
  """(fn, accounting, args) for 'infer' or 'train' at (batch, side, side, channels)."""
  x = jax.ShapeDtypeStruct((batch, side, side, channels), jnp.float32)
  if program == "infer":
    fn, state = measure.inference_fn(model)
    args = (state, x)
  else:
    fn, params, rest = measure.training_fn(model)
    args = (params, rest, x, x)
  compiled, acct = measure.compile_fn(fn, *args)
  return fn, acct, compiled, args
