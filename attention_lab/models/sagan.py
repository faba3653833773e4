"""SAGAN generator and discriminator (Zhang et al. 2019) with a swappable global-context module.

The residual layout of SAGAN's official code for 128×128 ImageNet, itself
SNGAN-projection's (Miyato & Koyama 2018):
- G: z (latent_dim = 128) → linear → 4×4×16w, up-blocks to 16w, 8w, 4w, 2w, w
  channels at 8², 16², 32², 64², 128² (BN-ReLU-up×2-conv3×3-BN-ReLU-conv3×3,
  shortcut up×2-conv1×1; nearest up-sampling), then BN-ReLU-conv3×3 to RGB, tanh.
- D: optimised block to w at 64², down-blocks to 2w, 4w, 8w, 16w at 32²…4², one
  more 16w block at 4² (ReLU-conv3×3-ReLU-conv3×3-avgpool, shortcut
  conv1×1-avgpool), ReLU, sum over positions, linear → 1 logit.
At 64×64 (which SAGAN does not define) both follow BigGAN's 64×64 arch: G
without its last up-block (16w, 8w, 4w, 2w), D with down-blocks w, 2w, 4w, 8w
and a last 16w block at 4² without down-sampling. At 32×32 (the embedded
digits, CIFAR at its own size) BigGAN's 32×32 arch: G from 4×4×4w through three
4w up-blocks, D 4w blocks down to 16², 8², then two at 8².

Every linear map and convolution is spectral-normalised (SAGAN Sec. 4.1;
`spectral_norm=False` drops it); convolutions and linears have biases and
xavier-uniform kernels, as in the official code. The context module sits
after the block whose output is `context_side`² (default 32×32; 16×16 at
resolution 32) in both G and D (SAGAN Table 1's best
place, feat32; the Ham paper's HamGAN puts Hamburger there too):
- "sa": SAGAN self-attention (f, g: C/8, h: C, γ = 0 at init; see
  layers.SelfAttention for how it differs from the official code);
- "refined": the refined linear self-attention, o = z(yᵀφ)/N (ISAGAN of the
  Refined-SA paper);
- "hamburger": HamGAN's Hamburger (`GanHamburger`: NMF, d = C, r = d/8, K = 6
  in training and evaluation; spectral-normalised breads, no batch norm, a
  σ-gated residual as the official HamGAN code);
- "conv": a 3×3 convolution C→C (SGAN, the Refined-SA paper's baseline that
  "replaces SA modules by convolution layers");
- "none": nothing.
The Refined-SA paper itself used the heykeetae DCGAN-style SAGAN (attention at
16² and 32² in G, 8² and 4² in D); its Tables 2-3 are measured here on this
layout instead (experiments/efficiency_gan.py).

`num_classes`: ≥ 2 makes both class-conditional as in SAGAN on ImageNet — G's
batch norms take per-class scales and offsets (conditional BN, ones/zeros at
init; or, with `class_embedding` = E > 0, BigGAN's form: 1 + W_g·e(y) and W_b·e(y)
from one (classes, E) embedding shared by all of G's norms, W zero at init, so that
the class signal is not capped by Adam's per-entry step) and D adds the projection
⟨embed(y), h⟩ (spectral-normalised embedding) to its logit; both then need `labels`
(B,) ints. `hierarchical_z` (BigGAN Sec. 3 / App. B): z is split into one chunk for the
linear input and one per up-block; each block's norms take [e(y), z_i] instead of e(y),
so the noise enters every resolution, not only the 4×4 input. `minibatch_std` = g > 0
(ProGAN): D's last block also sees the standard deviation over groups of g images. 0 or 1: unconditional, plain
batch norm, no projection, `labels` must be None. D always returns one
real/fake logit per image, (B,) float32; G returns (B, R, R, 3) float32 in
[-1, 1].
"""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import ops
from attention_lab.layers import batch_norm
from attention_lab.layers.self_attention import SelfAttention, maybe_spectral_norm, xavier
from attention_lab.models.registry import register

ATTENTIONS = ("none", "sa", "refined", "hamburger", "conv")
# Output channels (× width) of G's up-blocks, from 4×4 at 16·width; each doubles the side.
G_BLOCKS = {128: (16, 8, 4, 2, 1), 64: (16, 8, 4, 2), 32: (4, 4, 4)}
# Channels (× width) of G's 4×4 input.
G_START = {128: 16, 64: 16, 32: 4}
# Output channels (× width) of D's blocks and whether each halves the side; the first is the
# optimised block.
D_BLOCKS = {128: ((1, True), (2, True), (4, True), (8, True), (16, True), (16, False)),
            64: ((1, True), (2, True), (4, True), (8, True), (16, False)),
            32: ((4, True), (4, True), (4, False), (4, False))}
CONTEXT_SIDE = 32


def _check(attention, resolution, width, num_classes, context_side):
  if attention not in ATTENTIONS:
    raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
  if resolution not in G_BLOCKS:
    raise ValueError(f"resolution must be one of {tuple(sorted(G_BLOCKS))}, got {resolution!r}")
  if width < 1:
    raise ValueError(f"width must be >= 1, got {width}")
  if num_classes < 0:
    raise ValueError(f"num_classes must be >= 0, got {num_classes}")
  if context_side is not None and context_side not in context_sides(resolution):
    raise ValueError(f"context_side must be one of {context_sides(resolution)} at resolution "
                     f"{resolution} (a side both G and D have), got {context_side}")


def context_sides(resolution: int) -> tuple[int, ...]:
  """Feature sides where both G (after an up-block) and D (after a down-block) can hold the
  context module."""
  g = {4 * 2 ** (k + 1) for k in range(len(G_BLOCKS[resolution]))}
  d, side = set(), resolution
  for _, down in D_BLOCKS[resolution]:
    if down:
      side //= 2
      d.add(side)
  return tuple(sorted(g & d))


def _check_labels(labels, num_classes, batch):
  if num_classes < 2:
    if labels is not None:
      raise ValueError("labels must be None for an unconditional model (num_classes 0 or 1)")
  elif labels is None or labels.shape != (batch,):
    raise ValueError(f"labels must be class ids of shape ({batch},) when num_classes >= 2, got "
                     f"{None if labels is None else labels.shape}")


def _conv(cin, cout, kernel, spectral_norm, dtype, rngs):
  conv = nnx.Conv(cin, cout, (kernel, kernel), kernel_init=xavier, dtype=dtype, rngs=rngs)
  return maybe_spectral_norm(conv, spectral_norm, rngs)


def _up(x):
  return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


def _down(x):
  b, h, w, c = x.shape
  return x.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


class GanHamburger(nnx.Module):
  """HamGAN's Hamburger: out = x + σ·W_u·NMF(ReLU(W_l x)), O(K·N·d·r) time.

  After the official HamGAN code (Enjoy-Hamburger gan/HamGAN/ops.py,
  sn_hamburger_v1 as its discriminator builds it, use_bn=False): W_l (C → d)
  and W_u (d → C) spectral-normalised 1×1 maps without bias; NMF (Ham Alg. 2)
  of the N tokens from uniform random bases, `steps` iterations with the
  one-step gradient; σ a scalar, 0 at init, so the block starts as the
  identity (as SAGAN's γ). No batch norm in D or G: a BN in D sees [real;
  fake] in D's update and fakes alone in G's, and D learns to tell the halves
  apart by their batch statistics (on the digits, hinge d_loss 0.000 from step
  500 on, FID 190-320 after 2,500 steps, with layers.Hamburger's BN). The
  official G adds a class-conditional BN after W_u; here σ alone scales the
  output. Evaluation draws the bases from a fixed key (deterministic).
  """

  def __init__(self, channels: int, *, dim: int, rank: int, steps: int = 6,
               spectral_norm: bool = True, dtype=None, rngs: nnx.Rngs):
    linear = lambda cin, cout: maybe_spectral_norm(  # noqa: E731
        nnx.Linear(cin, cout, use_bias=False, kernel_init=xavier, dtype=dtype, rngs=rngs),
        spectral_norm, rngs)
    self.lower, self.upper = linear(channels, dim), linear(dim, channels)
    self.sigma = nnx.Param(jnp.zeros((), jnp.float32))
    self.dim, self.rank, self.steps = dim, rank, steps
    self.rngs = nnx.Rngs(bases=rngs.params())
    self.deterministic = False

  def __call__(self, x):
    b, h, w, c = x.shape
    tokens = jax.nn.relu(self.lower(x.reshape(b, h * w, c)))
    key = jax.random.key(0) if self.deterministic else self.rngs.bases()
    bases = ops.random_bases(key, b, self.dim, self.rank).astype(tokens.dtype)
    bases, codes = ops.nmf(tokens, bases, steps=self.steps, gradient="one_step")
    recon = jnp.einsum("bnr,bdr->bnd", codes, bases)
    return x + (self.sigma[...] * self.upper(recon)).reshape(b, h, w, c).astype(x.dtype)


def context_module(attention, channels, *, spectral_norm, dtype, rngs, key_pool=1):
  """The module `attention` names at `channels` channels (None for "none"); `key_pool`:
  SelfAttention's keys and values max-pooled key_pool×key_pool."""
  if attention in ("sa", "refined"):
    return SelfAttention(channels, variant=attention, spectral_norm=spectral_norm,
                         key_pool=key_pool, dtype=dtype, rngs=rngs)
  if attention == "hamburger":
    return GanHamburger(channels, dim=channels, rank=max(1, channels // 8), steps=6,
                        spectral_norm=spectral_norm, dtype=dtype, rngs=rngs)
  if attention == "conv":
    return _conv(channels, channels, 3, spectral_norm, dtype, rngs)
  return None


class ClassBatchNorm(nnx.Module):
  """Batch norm; with num_classes ≥ 2 its scale and offset depend on the class: looked up
  per class (SAGAN; `cond` = labels (B,)), or, with `embedding` > 0, linear maps (zero at
  init) of a class embedding shared by every norm of G (BigGAN; `cond` = (B, embedding))."""

  def __init__(self, features, num_classes, *, embedding=0, dtype, rngs):
    self.conditional = num_classes >= 2
    self.norm = batch_norm.BatchNorm(features, epsilon=1e-5, use_scale=not self.conditional,
                              use_bias=not self.conditional, dtype=dtype, rngs=rngs)
    self.embedding = embedding if self.conditional else 0
    if self.embedding:
      linear = lambda: nnx.Linear(embedding, features, use_bias=False,  # noqa: E731
                                  kernel_init=nnx.initializers.zeros, rngs=rngs)
      self.gain, self.offset = linear(), linear()
    elif self.conditional:
      self.scale = nnx.Param(jnp.ones((num_classes, features), jnp.float32))
      self.bias = nnx.Param(jnp.zeros((num_classes, features), jnp.float32))

  def __call__(self, x, cond):
    x = self.norm(x)
    if not self.conditional:
      return x
    if self.embedding:
      scale, bias = 1.0 + self.gain(cond), self.offset(cond)
    else:
      scale, bias = self.scale[...][cond], self.bias[...][cond]
    return (x * scale[:, None, None, :] + bias[:, None, None, :]).astype(x.dtype)


class UpBlock(nnx.Module):
  def __init__(self, cin, cout, num_classes, *, embedding=0, spectral_norm, dtype, rngs):
    self.norm1 = ClassBatchNorm(cin, num_classes, embedding=embedding, dtype=dtype, rngs=rngs)
    self.conv1 = _conv(cin, cout, 3, spectral_norm, dtype, rngs)
    self.norm2 = ClassBatchNorm(cout, num_classes, embedding=embedding, dtype=dtype, rngs=rngs)
    self.conv2 = _conv(cout, cout, 3, spectral_norm, dtype, rngs)
    self.shortcut = _conv(cin, cout, 1, spectral_norm, dtype, rngs)

  def __call__(self, x, labels):
    y = self.conv1(_up(nnx.relu(self.norm1(x, labels))))
    y = self.conv2(nnx.relu(self.norm2(y, labels)))
    return self.shortcut(_up(x)) + y


class DownBlock(nnx.Module):
  """D's residual block; `optimized`: the first block (no leading ReLU, pool before the 1×1)."""

  def __init__(self, cin, cout, *, down, optimized=False, spectral_norm, dtype, rngs):
    self.down, self.optimized = down, optimized
    self.conv1 = _conv(cin, cout, 3, spectral_norm, dtype, rngs)
    self.conv2 = _conv(cout, cout, 3, spectral_norm, dtype, rngs)
    self.shortcut = (_conv(cin, cout, 1, spectral_norm, dtype, rngs)
                     if down or cin != cout else None)

  def __call__(self, x):
    y = self.conv2(nnx.relu(self.conv1(x if self.optimized else nnx.relu(x))))
    if self.down:
      y = _down(y)
    if self.shortcut is None:
      return x + y
    if self.optimized:
      return self.shortcut(_down(x)) + y
    skip = self.shortcut(x)
    return (_down(skip) if self.down else skip) + y


def minibatch_stddev(x, group: int):
  """ProGAN's minibatch standard deviation (Karras et al. 2018, Sec. 3): x (B, H, W, C) →
  (B, H, W, C + 1); the extra channel holds, for each group of `group` images (fewer when B
  is smaller; B must be a multiple), the standard deviation over the group of each feature at
  each position, averaged over features and positions. D thereby sees how much a batch
  varies, so a G that ignores its noise is told apart from the data. Groups are consecutive
  images (ProGAN strides them): D sees [real; fake] as one batch, and a group must not mix
  the halves."""
  b, h, w, c = x.shape
  g = min(group, b)
  if b % g:
    raise ValueError(f"minibatch_std: batch {b} must be a multiple of the group size {g}")
  y = x.astype(jnp.float32).reshape(b // g, g, h, w, c)
  std = jnp.sqrt(jnp.var(y, axis=1) + 1e-8).mean(axis=(1, 2, 3))  # (B/g,)
  feature = jnp.broadcast_to(jnp.repeat(std, g)[:, None, None, None], (b, h, w, 1))
  return jnp.concatenate([x, feature.astype(x.dtype)], axis=-1)


class SaganGenerator(nnx.Module):
  """z (B, latent_dim) [, labels (B,)] → images (B, R, R, 3) in [-1, 1]; see the module doc."""

  def __init__(self, *, num_classes: int = 0, resolution: int = 128, attention: str = "sa",
               width: int = 64, latent_dim: int = 128, spectral_norm: bool = True, dtype=None,
               context_side: int | None = None, class_embedding: int = 0,
               hierarchical_z: bool = False, key_pool: int = 1, rngs: nnx.Rngs):
    _check(attention, resolution, width, num_classes, context_side)
    context_side = context_side or min(CONTEXT_SIDE, max(context_sides(resolution)))
    if latent_dim < 1:
      raise ValueError(f"latent_dim must be >= 1, got {latent_dim}")
    if class_embedding < 0:
      raise ValueError(f"class_embedding must be >= 0, got {class_embedding}")
    embedding = class_embedding if num_classes >= 2 else 0
    chunks = len(G_BLOCKS[resolution]) + 1
    if hierarchical_z and (not embedding or latent_dim % chunks):
      raise ValueError(f"hierarchical_z needs a class-conditional G with class_embedding > 0 "
                       f"and latent_dim divisible by {chunks} (blocks + 1) at resolution "
                       f"{resolution}, got num_classes={num_classes}, class_embedding="
                       f"{class_embedding}, latent_dim={latent_dim}")
    self.z_chunk = latent_dim // chunks if hierarchical_z else 0
    self.class_embed = (nnx.Embed(num_classes, embedding, dtype=dtype, rngs=rngs)
                        if embedding else None)
    self.num_classes, self.latent_dim, self.width = num_classes, latent_dim, width
    cin = G_START[resolution] * width
    self.linear = maybe_spectral_norm(
        nnx.Linear(self.z_chunk or latent_dim, 16 * cin, kernel_init=xavier, dtype=dtype,
                   rngs=rngs),
        spectral_norm, rngs)
    blocks, side = [], 4
    for mult in G_BLOCKS[resolution]:
      blocks.append(UpBlock(cin, mult * width, num_classes, embedding=embedding + self.z_chunk,
                            spectral_norm=spectral_norm, dtype=dtype, rngs=rngs))
      cin, side = mult * width, 2 * side
      if side == context_side:
        self.context_after = len(blocks) - 1
        self.context = context_module(attention, cin, spectral_norm=spectral_norm, dtype=dtype,
                                      rngs=rngs, key_pool=key_pool)
    self.blocks = nnx.List(blocks)
    self.norm = batch_norm.BatchNorm(cin, epsilon=1e-5, dtype=dtype, rngs=rngs)
    self.out = _conv(cin, 3, 3, spectral_norm, dtype, rngs)

  def __call__(self, z, labels=None):
    if z.ndim != 2 or z.shape[1] != self.latent_dim:
      raise ValueError(f"z must have shape (batch, {self.latent_dim}), got {z.shape}")
    _check_labels(labels, self.num_classes, z.shape[0])
    cond = labels if self.class_embed is None else self.class_embed(labels)
    if self.z_chunk:  # BigGAN: z[0] to the linear, z[i] with the class into block i's norms
      zs = jnp.split(z, self.latent_dim // self.z_chunk, axis=-1)
      z, conds = zs[0], [jnp.concatenate([cond, zi.astype(cond.dtype)], -1) for zi in zs[1:]]
    else:
      conds = [cond] * len(self.blocks)
    x = self.linear(z).reshape(z.shape[0], 4, 4, -1)
    for i, block in enumerate(self.blocks):
      x = block(x, conds[i])
      if i == self.context_after and self.context is not None:
        x = self.context(x)
    x = self.out(nnx.relu(self.norm(x)))
    return jnp.tanh(x.astype(jnp.float32))


class SaganDiscriminator(nnx.Module):
  """images (B, R, R, 3) [, labels (B,)] → real/fake logits (B,); see the module doc."""

  def __init__(self, *, num_classes: int = 0, resolution: int = 128, attention: str = "sa",
               width: int = 64, spectral_norm: bool = True, dtype=None,
               context_side: int | None = None, minibatch_std: int = 0, key_pool: int = 1,
               rngs: nnx.Rngs):
    _check(attention, resolution, width, num_classes, context_side)
    context_side = context_side or min(CONTEXT_SIDE, max(context_sides(resolution)))
    if minibatch_std < 0 or minibatch_std == 1:
      raise ValueError(f"minibatch_std must be 0 (off) or a group size >= 2, got {minibatch_std}")
    self.num_classes, self.resolution, self.minibatch_std = num_classes, resolution, minibatch_std
    blocks, cin, side = [], 3, resolution
    last = len(D_BLOCKS[resolution]) - 1
    for i, (mult, down) in enumerate(D_BLOCKS[resolution]):
      extra = 1 if minibatch_std and i == last else 0
      blocks.append(DownBlock(cin + extra, mult * width, down=down, optimized=i == 0,
                              spectral_norm=spectral_norm, dtype=dtype, rngs=rngs))
      cin, side = mult * width, side // 2 if down else side
      if side == context_side and down:
        self.context_after = i
        self.context = context_module(attention, cin, spectral_norm=spectral_norm, dtype=dtype,
                                      rngs=rngs, key_pool=key_pool)
    self.blocks = nnx.List(blocks)
    self.linear = maybe_spectral_norm(
        nnx.Linear(cin, 1, kernel_init=xavier, dtype=dtype, rngs=rngs), spectral_norm, rngs)
    self.embed = (maybe_spectral_norm(
        nnx.Embed(num_classes, cin, embedding_init=xavier, dtype=dtype, rngs=rngs),
        spectral_norm, rngs, param="embedding") if num_classes >= 2 else None)

  def __call__(self, x, labels=None):
    r = self.resolution
    if x.ndim != 4 or x.shape[1:] != (r, r, 3):
      raise ValueError(f"x must have shape (batch, {r}, {r}, 3), got {x.shape}")
    _check_labels(labels, self.num_classes, x.shape[0])
    for i, block in enumerate(self.blocks):
      if self.minibatch_std and i == len(self.blocks) - 1:
        x = minibatch_stddev(x, self.minibatch_std)
      x = block(x)
      if i == self.context_after and self.context is not None:
        x = self.context(x)
    h = jnp.sum(nnx.relu(x), axis=(1, 2))
    out = self.linear(h)[:, 0]
    if self.embed is not None:
      out = out + jnp.sum(h * self.embed(labels), axis=-1)
    return out.astype(jnp.float32)


@register("sagan_generator")
def sagan_generator(*, num_classes: int, rngs: nnx.Rngs, **overrides) -> SaganGenerator:
  """SAGAN G; overrides: resolution, attention, width, latent_dim, spectral_norm, dtype,
  context_side, class_embedding, hierarchical_z, key_pool."""
  return SaganGenerator(num_classes=num_classes, rngs=rngs, **overrides)


@register("sagan_discriminator")
def sagan_discriminator(*, num_classes: int, rngs: nnx.Rngs, **overrides) -> SaganDiscriminator:
  """SAGAN D; overrides: resolution, attention, width, spectral_norm, dtype, context_side,
  minibatch_std, key_pool."""
  return SaganDiscriminator(num_classes=num_classes, rngs=rngs, **overrides)
