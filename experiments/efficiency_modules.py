"""Modules the efficiency tables need that attention_lab.layers does not provide.

- `DoubleAttention`: the A² block (Chen et al., A²-Nets, NeurIPS 2018), a row
  of Ham Table 3.
- `SaganGenerator` / `SaganDiscriminator`: a 64×64 SAGAN (Zhang et al. 2018,
  the heykeetae/Self-Attention-GAN layout the Refined-SA paper used) with its
  attention blocks "sa" (SAGAN), "refined" (ISAGAN: out = z·(yᵀφ)/N, Refined-SA
  Eq. 4) or "conv" (SGAN: each attention block replaced by a 3×3 convolution).
  Used by experiments/efficiency_gan.py only when the model registry has no
  `sagan_generator` / `sagan_discriminator`. Spectral normalisation is left out
  (it costs one power iteration per weight and does not change the comparison).
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention_lab import ops
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


ATTENTIONS = ("sa", "refined", "conv")


def _INIT(key, shape, dtype=jnp.float32):  # pylint: disable=invalid-name
  """N(0, 0.02) kernels (DCGAN/SAGAN practice), drawn by numpy from the key's bits.

  Numpy sampling needs no XLA compilation per kernel shape (each jax.random
  initialiser compiles separately, ~1 s apiece on a small CPU), which keeps the
  efficiency tables' tiny presets fast. Deterministic for a given key.
  """
  seed = int(np.asarray(jax.random.key_data(key)).ravel()[-1])
  return jnp.asarray(np.random.default_rng(seed).normal(0.0, 0.02, shape), dtype)


class SaganAttention(nnx.Module):
  """SAGAN self-attention (f, g: C/8 channels, h: C; γ initialised to 0) and its variants.

  "sa": out = x + γ·softmax(f(x)ᵀ g(x)) h(x) (N×N map); "refined": out = x + γ·f(x)
  (g(x)ᵀ h(x))/N (Refined-SA Eq. 4, `dot_product_attention(normalization="mean")`
  with scale 1); "conv": out = a 3×3 convolution C→C (the SGAN baseline).
  """

  def __init__(self, channels: int, attention: str, *, dtype=None, rngs: nnx.Rngs):
    if attention not in ATTENTIONS:
      raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    self.attention = attention
    if attention == "conv":
      self.conv = nnx.Conv(channels, channels, (3, 3), kernel_init=_INIT, dtype=dtype, rngs=rngs)
      return
    conv = lambda o: nnx.Conv(channels, o, (1, 1), kernel_init=_INIT, dtype=dtype, rngs=rngs)
    self.f, self.g, self.h = conv(max(1, channels // 8)), conv(max(1, channels // 8)), conv(
        channels)
    self.gamma = nnx.Param(jnp.zeros(()))

  def __call__(self, x):
    if self.attention == "conv":
      return self.conv(x)
    b, hh, ww, c = x.shape
    flat = lambda t: t.reshape(b, hh * ww, 1, t.shape[-1])
    q, k, v = flat(self.f(x)), flat(self.g(x)), flat(self.h(x))
    norm = "softmax" if self.attention == "sa" else "mean"
    out = ops.dot_product_attention(q, k, v, scale=1.0, normalization=norm)
    return x + self.gamma[...] * out.reshape(b, hh, ww, c)


class SaganGenerator(nnx.Module):
  """64×64 SAGAN generator: z → 4² ×8c → 8² ×4c → 16² ×2c → attn → 32² ×c → attn → 64² ×3."""

  def __init__(self, attention: str = "sa", *, z_dim: int = 128, width: int = 64,
               rngs: nnx.Rngs):
    c = width
    self.z_dim = z_dim
    self.l1 = nnx.ConvTranspose(z_dim, 8 * c, (4, 4), padding="VALID", kernel_init=_INIT,
                                 rngs=rngs)
    self.ups = nnx.List([nnx.ConvTranspose(i, o, (4, 4), strides=(2, 2), padding="SAME",
                                           kernel_init=_INIT, rngs=rngs)
                         for i, o in ((8 * c, 4 * c), (4 * c, 2 * c), (2 * c, c))])
    self.norms = nnx.List([nnx.BatchNorm(ch, rngs=rngs) for ch in (8 * c, 4 * c, 2 * c, c)])
    self.attn1 = SaganAttention(2 * c, attention, rngs=rngs)
    self.attn2 = SaganAttention(c, attention, rngs=rngs)
    self.last = nnx.ConvTranspose(c, 3, (4, 4), strides=(2, 2), padding="SAME",
                                  kernel_init=_INIT, rngs=rngs)

  def __call__(self, z):
    x = jax.nn.relu(self.norms[0](self.l1(z.reshape(z.shape[0], 1, 1, -1))))
    for i, up in enumerate(self.ups):
      x = jax.nn.relu(self.norms[i + 1](up(x)))
      if i == 1:
        x = self.attn1(x)
      elif i == 2:
        x = self.attn2(x)
    return jnp.tanh(self.last(x))


class SaganDiscriminator(nnx.Module):
  """64×64 SAGAN discriminator: 32² ×c → 16² ×2c → 8² ×4c → attn → 4² ×8c → attn → 1."""

  def __init__(self, attention: str = "sa", *, width: int = 64, rngs: nnx.Rngs):
    c = width
    self.convs = nnx.List([nnx.Conv(i, o, (4, 4), strides=(2, 2), kernel_init=_INIT, rngs=rngs)
                           for i, o in ((3, c), (c, 2 * c), (2 * c, 4 * c), (4 * c, 8 * c))])
    self.attn1 = SaganAttention(4 * c, attention, rngs=rngs)
    self.attn2 = SaganAttention(8 * c, attention, rngs=rngs)
    self.last = nnx.Conv(8 * c, 1, (4, 4), padding="VALID", kernel_init=_INIT, rngs=rngs)

  def __call__(self, x):
    for i, conv in enumerate(self.convs):
      x = jax.nn.leaky_relu(conv(x), 0.1)
      if i == 2:
        x = self.attn1(x)
      elif i == 3:
        x = self.attn2(x)
    return self.last(x).reshape(x.shape[0])


# Builders of the Ham Table 3 rows (used by experiments/efficiency.py and bench_ops.py).


def build_module(name: str, channels: int, config):
  """The context modules of Ham Table 3 at `channels` input channels."""
  from attention_lab import layers  # pylint: disable=g-import-not-at-top
  rngs = nnx.Rngs(0)
  if name == "sa":
    return layers.GlobalAttention(channels, "softmax", num_heads=1, project="qkv",
                                  out_features=channels, rngs=rngs)
  if name == "a2":
    return DoubleAttention(channels, config.a2_features, config.a2_features,
                                              rngs=rngs)
  if name in ("ham_cd", "ham_nmf"):
    return layers.Hamburger(channels, ham=name[4:], dim=config.ham_dim, rank=config.ham_rank,
                            train_steps=config.ham_steps, eval_steps=config.ham_steps,
                            rngs=rngs)
  raise ValueError(f"unknown module {name!r}")


def ham_flops(name, channels, side, config, program: str) -> float:
  """XLA flops of a Hamburger with the solver loop counted `steps` times.

  XLA's cost analysis counts a while-loop body once; the solver runs K−1
  iterations in a loop plus one outside. With flops(K) reported as
  f(1) + body for any K ≥ 2, the body is f(2) − f(1) and the true count is
  f(1) + (K−1)·(f(2) − f(1)).
  """
  counts = []
  for steps in (1, 2):
    c = config.copy_and_resolve_references()
    c.ham_steps = steps
    model = build_module(name, channels, c)
    counts.append(module_program(model, program, config.batch, side, channels)[1]["xla_flops"])
  return counts[0] + (config.ham_steps - 1) * (counts[1] - counts[0])


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
