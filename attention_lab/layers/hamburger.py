"""Hamburger: matrix decomposition as a global-context block (Ham paper Sec. 2.2, Fig. 1)."""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import ops

HAMS = ("nmf", "vq", "cd")


class Hamburger(nnx.Module):
  """out = ReLU(x + BN(W_u · ham(ReLU?(W_l x + b_l)))), ham a low-rank reconstruction.

  Lower bread: 1×1 conv with bias to `dim` channels (+ReLU for NMF, which needs
  non-negative input). Ham: the H·W tokens of each image are decomposed by NMF
  (Alg. 2), soft VQ (Alg. 1) or soft CD (Alg. 3) with `rank` bases and
  reconstructed as codes @ basesᵀ. Upper bread: 1×1 conv without bias, batch
  norm, then ReLU of the residual sum. Bases are drawn fresh on every training
  call from the module's "bases" RNG stream (NMF: uniform, VQ/CD: normal; the
  reference's "random" initialisation, the best in Ham Table 8); in evaluation
  (`model.eval()`, deterministic=True) they come from a fixed key and
  `eval_steps` are run, so the same input always gives the same output (the
  reference code is random at evaluation). One decomposition per image
  (groups S = 1). Cost: O(steps·H·W·dim·rank) for the ham plus two 1×1 convs.

  Args:
    in_features: C.
    ham: "nmf", "vq" or "cd".
    dim: d, the token dimension of the decomposition.
    rank: r, the number of bases.
    train_steps / eval_steps: K in training / evaluation.
    gradient: "one_step" (Ham Eq. 13) or "bptt".
    temperature: T of VQ/CD (the reference's inverse temperature is 100).
    beta: ridge weight of CD.
    dtype: compute dtype of the convolutions (the ham itself runs in float32).
  """

  def __init__(self, in_features: int, *, ham: str = "nmf", dim: int = 512, rank: int = 64,
               train_steps: int = 6, eval_steps: int = 7, gradient: str = "one_step",
               temperature: float = 0.01, beta: float = 0.1, dtype=None, rngs: nnx.Rngs):
    if ham not in HAMS:
      raise ValueError(f"ham must be one of {HAMS}, got {ham!r}")
    self.ham, self.rank, self.gradient = ham, rank, gradient
    self.train_steps, self.eval_steps = train_steps, eval_steps
    self.temperature, self.beta = temperature, beta
    self.deterministic = False
    self.lower = nnx.Conv(in_features, dim, (1, 1), use_bias=True, dtype=dtype, rngs=rngs)
    self.upper = nnx.Conv(dim, in_features, (1, 1), use_bias=False, dtype=dtype, rngs=rngs)
    self.norm = nnx.BatchNorm(in_features, dtype=dtype, rngs=rngs)
    self.rngs = nnx.Rngs(bases=rngs.params())

  def _decompose(self, tokens, key, steps):
    batch, _, dim = tokens.shape
    distribution = "uniform" if self.ham == "nmf" else "normal"
    bases = ops.random_bases(key, batch, dim, self.rank, distribution=distribution)
    if self.ham == "nmf":
      bases, codes = ops.nmf(tokens, bases, steps=steps, gradient=self.gradient)
    elif self.ham == "vq":
      bases, codes = ops.soft_vq(tokens, bases, steps=steps, temperature=self.temperature,
                                 gradient=self.gradient)
    else:
      bases, codes = ops.soft_cd(tokens, bases, steps=steps, temperature=self.temperature,
                                 beta=self.beta, gradient=self.gradient)
    return codes @ jnp.swapaxes(bases, 1, 2)

  def __call__(self, x):
    if x.ndim != 4:
      raise ValueError(f"x must have shape (batch, height, width, channels), got {x.shape}")
    y = self.lower(x)
    if self.ham == "nmf":
      y = jax.nn.relu(y)
    if self.deterministic:
      key, steps = jax.random.key(0), self.eval_steps
    else:
      key, steps = self.rngs.bases(), self.train_steps
    b, h, w, d = y.shape
    y = self._decompose(y.reshape(b, h * w, d), key, steps).reshape(b, h, w, d)
    return jax.nn.relu(x + self.norm(self.upper(y)))
