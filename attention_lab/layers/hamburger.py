"""Hamburger: matrix decomposition as a global-context block (Ham paper Sec. 2.2, Fig. 1)."""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import ops
from attention_lab.layers import batch_norm
from attention_lab.layers import recording

HAMS = ("nmf", "vq", "cd")
INITS = ("random", "fixed", "learned", "online")


class HamBases(nnx.Variable):
  """Non-trainable dictionary of the "fixed" and "online" initialisations, (S, d/S, R)."""


class Hamburger(nnx.Module):
  """out = ReLU(x + BN(W_u · ham(ReLU?(W_l x + b_l)))), ham a low-rank reconstruction.

  The official HamburgerV1 (github.com/Gsunshine/Enjoy-Hamburger,
  seg/HamNet/hamburger/burger.py and ham.py), which produced the paper's
  tables. Lower bread: 1×1 conv with bias to `dim` channels (+ReLU for NMF,
  which needs non-negative input). Ham: the d channels are split into `groups`
  S contiguous groups of d/S, and the H·W tokens of each (image, group) are
  decomposed separately, tokens (B·S, H·W, d/S), by NMF (Alg. 2), soft VQ
  (Alg. 1) or soft CD (Alg. 3) with `rank` bases each: the solver's K loop
  steps, then its final codes update (`ops.nmf` etc.: the reference's
  `compute_coef`), into codes (N, r) and bases (d/S, r) (the reference code's
  MD_S, which the paper does not discuss; S = 1 by default, its setting).
  Upper bread: 1×1 conv W_u without bias, batch norm, then ReLU of the residual
  sum. With the same weights and initial bases the output and its gradients
  equal HamburgerV1's to float64 rounding for NMF, VQ and CD, S = 1 and 2
  (tests/layers/test_hamburger.py, against a transcription of the official
  forward); gradient="one_step" is HamNet's (the loop under no_grad).

  Deliberate differences from the reference, and why:
  - Evaluation is deterministic: "random" bases come from a fixed key in
    evaluation (the reference draws fresh ones, so its evaluation is random),
    and "online" bases are updated in training only (see below).
  - Initialisers: ours are flax's (convs lecun-normal, bias zero); the
    reference draws conv weights from N(0, 2/C_out) and conv biases from
    torch's default uniform. Only the starting point of training differs.
  - Batch-norm momentum: 0.9 (running = 0.9·running + 0.1·batch; torch's
    default), not the reference's BN_MOM = 3e-4 (0.9997 in flax's convention)
    nor flax's default 0.99. The BN's input is a near-constant channel (the
    reconstruction's mean over tokens dominates: mean/std ~30 on the digits
    model) whose mean drifts while the weights train, so running averages
    that lag by ~100 steps (flax's 0.99) put evaluation many σ off
    (experiments/results/default_operators.md). `norm_momentum` sets it.

  The upper conv is applied to the low-rank factors, never to the (N, d)
  reconstruction: W_u(codes·basesᵀ) = codes·(basesᵀ·W_u), the same function
  and gradients. Multiply-adds: lower conv N·C·d, ham O(steps·N·d·r), upper
  r·d·C + N·r·C instead of N·r·d + N·d·C (at N = 128², C = d = 512, r = 64:
  0.55G instead of 4.83G; Ham Table 3's MAC count is therefore 4.3G below the
  paper's, which convolves the reconstruction).

  Initialisation of the dictionary (Ham Table 8; NMF: uniform, VQ/CD: normal,
  columns L2-normalised over d/S, as the reference):
  - "random" (default, the best in Table 8): fresh bases on every training
    call from the module's "bases" RNG stream; in evaluation they come from a
    fixed key, so evaluation is deterministic (the reference is random there).
  - "fixed": drawn once at construction and kept as a non-trainable
    `HamBases` variable, the same for every image.
  - "learned": an (S, d/S, R) parameter trained by backprop. Table 8 learns it
    through the solver with BPTT, so `gradient` defaults to "bptt" here (the
    one-step gradient of Eq. 13 never reaches the initial bases, and is
    refused). NMF uses |D| so that its bases stay non-negative (our choice).
  - "online" (warm start with online update): a `HamBases` variable, updated
    after each training call by the reference's rule D ← normalise(D + η·(D̄ −
    D)) with D̄ the batch mean of the solver's output bases, η =
    `online_momentum` (the reference's ETA 0.9), columns L2-normalised. The
    reference runs this update at evaluation (`not self.training`), which
    makes evaluation depend on the batches seen; we run it in training only,
    so evaluation is deterministic.
  Training runs `train_steps` solver steps, evaluation (`model.eval()`)
  `eval_steps`.

  With `record_attention` on (`recording.attention_weights`), sows the codes as
  the "attention" of the tokens to the bases, (B, S, H, W, R), and the bases
  (B, S, d/S, R): per group, the reconstruction is codes·basesᵀ.

  Args:
    in_features: C.
    ham: "nmf", "vq" or "cd".
    dim: d, the token dimension of the decomposition (before the group split).
    rank: r, the number of bases per group.
    groups: S; must divide dim.
    init: one of INITS (see above).
    train_steps / eval_steps: K in training / evaluation.
    gradient: "one_step" (Ham Eq. 13) or "bptt"; default "bptt" for
      init="learned", else "one_step".
    temperature: T of VQ/CD (the reference's inverse temperature INV_T is 100:
      T = 0.01).
    beta: ridge weight of CD.
    online_momentum: η of the "online" update.
    norm_momentum: momentum of the upper bread's batch norm (flax convention).
    without: components to remove (Ham Table 2): "ham" (breads only: upper(lower(x))),
      "upper" and / or "lower" (that bread removed; needs dim == in_features).
    dtype: compute dtype of the convolutions (the ham itself runs in float32).
    unroll: the solver's loops traced as Python loops (`ops.nmf`'s `unroll`): the same
      function, a program in which XLA's cost_analysis counts every solver step.
  """

  def __init__(self, in_features: int, *, ham: str = "nmf", dim: int = 512, rank: int = 64,
               groups: int = 1, init: str = "random", train_steps: int = 6,
               eval_steps: int = 7, gradient: str | None = None, temperature: float = 0.01,
               beta: float = 0.1, online_momentum: float = 0.9, norm_momentum: float = 0.9,
               without: tuple[str, ...] = (), dtype=None, unroll: bool = False,
               rngs: nnx.Rngs):
    without = tuple(without)
    if not set(without) <= {"ham", "upper", "lower"}:
      raise ValueError(f"without must hold only 'ham', 'upper', 'lower', got {without!r}")
    if ("upper" in without or "lower" in without) and dim != in_features:
      raise ValueError(f"without a bread, dim ({dim}) must equal in_features ({in_features})")
    self.without = without
    if ham not in HAMS:
      raise ValueError(f"ham must be one of {HAMS}, got {ham!r}")
    if init not in INITS:
      raise ValueError(f"init must be one of {INITS}, got {init!r}")
    if not isinstance(groups, int) or groups < 1 or dim % groups:
      raise ValueError(f"groups must be a positive integer dividing dim ({dim}), got {groups!r}")
    if gradient is None:
      gradient = "bptt" if init == "learned" else "one_step"
    if init == "learned" and gradient != "bptt":
      raise ValueError(
          "gradient must be 'bptt' for init='learned' (the one-step gradient does not reach "
          f"the initial bases), got {gradient!r}")
    if not 0 < online_momentum <= 1:
      raise ValueError(f"online_momentum must be in (0, 1], got {online_momentum!r}")
    if not 0 <= norm_momentum < 1:
      raise ValueError(f"norm_momentum must be in [0, 1), got {norm_momentum!r}")
    self.ham, self.rank, self.groups, self.init = ham, rank, groups, init
    self.gradient, self.train_steps, self.eval_steps = gradient, train_steps, eval_steps
    self.temperature, self.beta, self.online_momentum = temperature, beta, online_momentum
    self.unroll = unroll
    self.deterministic = False
    self.record_attention = False  # see `recording`
    # The 1×1 convolutions as Linear maps over the channel axis: the same function and
    # initialisation, and XLA:CPU runs a dot faster than the equivalent 1×1 conv
    # (experiments/results/performance_goals.md, section 3).
    self.lower = (None if "lower" in without else
                  nnx.Linear(in_features, dim, use_bias=True, dtype=dtype, rngs=rngs))
    self.upper = (None if "upper" in without else
                  nnx.Linear(dim, in_features, use_bias=False, dtype=dtype, rngs=rngs))
    self.norm = batch_norm.BatchNorm(in_features, momentum=norm_momentum, dtype=dtype, rngs=rngs)
    self.distribution = "uniform" if ham == "nmf" else "normal"
    if init == "random":
      self.rngs = nnx.Rngs(bases=rngs.params())
    else:
      bases = ops.random_bases(rngs.params(), groups, dim // groups, rank,
                               distribution=self.distribution)
      self.bases = nnx.Param(bases) if init == "learned" else HamBases(bases)

  def _initial_bases(self, batch, dim):
    """(B·S, d/S, R) initial bases, example-major like the tokens."""
    if self.init == "random":
      key = jax.random.key(0) if self.deterministic else self.rngs.bases()
      return ops.random_bases(key, batch * self.groups, dim, self.rank,
                              distribution=self.distribution)
    bases = self.bases[...]
    if self.init == "learned" and self.ham == "nmf":
      bases = jnp.abs(bases)
    return jnp.broadcast_to(bases, (batch, *bases.shape)).reshape(-1, *bases.shape[1:])

  def _decompose(self, tokens, bases, steps):
    """(bases (B', d', r), codes (B', N, r)) of tokens (B', N, d') from initial bases."""
    if self.ham == "nmf":
      bases, codes = ops.nmf(tokens, bases, steps=steps, gradient=self.gradient,
                             unroll=self.unroll)
    elif self.ham == "vq":
      bases, codes = ops.soft_vq(tokens, bases, steps=steps, temperature=self.temperature,
                                 gradient=self.gradient, unroll=self.unroll)
    else:
      bases, codes = ops.soft_cd(tokens, bases, steps=steps, temperature=self.temperature,
                                 beta=self.beta, gradient=self.gradient, unroll=self.unroll)
    return bases, codes

  def __call__(self, x):
    if x.ndim != 4:
      raise ValueError(f"x must have shape (batch, height, width, channels), got {x.shape}")
    b, h, w, _ = x.shape
    # On (B·H·W, C) rows XLA:CPU fuses the bias and ReLU into the GEMM (not on 4D arrays).
    y = x.reshape(b * h * w, -1)
    if self.lower is not None:
      y = self.lower(y)
    if self.ham == "nmf":
      y = jax.nn.relu(y)
    if "ham" in self.without:  # Ham Table 2 "- ham": the two breads alone
      y = self.upper(y) if self.upper is not None else y
      return jax.nn.relu(x + self.norm(y.reshape(b, h, w, -1)))
    d, s = y.shape[-1], self.groups
    # (B·H·W, S·d') -> (B·S, H·W, d'): group g holds channels [g·d', (g+1)·d').
    tokens = jnp.swapaxes(y.reshape(b, h * w, s, d // s), 1, 2).reshape(b * s, h * w, d // s)
    steps = self.eval_steps if self.deterministic else self.train_steps
    bases, codes = self._decompose(tokens, self._initial_bases(b, d // s), steps)
    recording.sow_if_recording(
        self, recording.WEIGHTS, lambda: codes.reshape(b, s, h, w, -1).astype(jnp.float32))
    recording.sow_if_recording(
        self, recording.BASES, lambda: bases.reshape(b, s, *bases.shape[1:]).astype(jnp.float32))
    if self.init == "online" and not self.deterministic:
      solved = jax.lax.stop_gradient(jnp.mean(bases.reshape(b, s, *bases.shape[1:]), axis=0))
      old = self.bases[...]
      new = old + self.online_momentum * (solved.astype(old.dtype) - old)
      self.bases[...] = new * jax.lax.rsqrt(
          jnp.maximum(jnp.sum(jnp.square(new), axis=1, keepdims=True), 1e-12))
    if self.upper is None:  # Ham Table 2 "- upper bread": the reconstruction itself
      recon = jnp.einsum("bnr,bdr->bnd", codes, bases.astype(codes.dtype))
      recon = jnp.swapaxes(recon.reshape(b, s, h * w, d // s), 1, 2).reshape(b, h, w, d)
      return jax.nn.relu(x + self.norm(recon.astype(x.dtype)))
    return jax.nn.relu(x + self.norm(self._upper_of_factors(bases, codes, (b, h, w))))

  def _upper_of_factors(self, bases, codes, grid):
    """W_u(codes·basesᵀ) as codes·(basesᵀ·W_u), summed over the S groups: (B, H, W, C)."""
    b, h, w = grid
    s, rank = self.groups, self.rank
    kernel = self.upper.kernel[...].reshape(s, -1, self.upper.out_features)  # (S, d', C)
    bases, codes, kernel = self.upper.promote_dtype(
        (bases, codes, kernel), dtype=self.upper.dtype)
    projected = jnp.einsum("bsdr,sdc->bsrc", bases.reshape(b, s, -1, rank), kernel)
    out = jnp.einsum("bsnr,bsrc->bnc", codes.reshape(b, s, h * w, rank), projected)
    return out.reshape(b, h, w, -1)
