"""Matrix decompositions of the Hamburger "ham" (Ham paper Alg. 1-3, Eq. 13).

x (B, N, D) holds N tokens of dimension D (the paper's X is D×N, we use its
transpose); bases (B, D, R) is the dictionary D; codes (B, N, R) is Cᵀ. The
low-rank reconstruction is codes @ basesᵀ (B, N, D).

As the official Hamburger code (github.com/Gsunshine/Enjoy-Hamburger,
seg/HamNet/hamburger/ham.py), which produced the paper's tables, every solver
runs `steps` loop updates (the codes, then the bases from the new codes) and
then ONE final codes update from the final bases (the reference's
`compute_coef`); the returned codes are those final codes.

Gradients (Eq. 13 as HamNet runs it): gradient="one_step" runs the whole loop
under `jax.lax.stop_gradient` (the reference's `torch.no_grad()`), so only the
final codes update sees the live x, with the loop's bases and codes frozen;
the backward pass costs one codes update, whatever `steps`. gradient="bptt"
differentiates every update (the mmseg LightHam head, which drops the
`no_grad`). The returned values never depend on `gradient`.

The loops are `lax.fori_loop`s; `unroll=True` traces them as Python loops
instead: the same values, a program that grows with `steps`, in which XLA's
cost_analysis counts every step (it counts a loop body once).

Choices from the reference code (the paper leaves them open): codes start as
softmax(inv_t·x·bases) over R with inv_t = 1 for NMF (VQ and CD never read
their initial codes); NMF multiplicative updates use eps = 1e-6 in the
denominators; VQ and CD divide the codes by their mass over the tokens + 1e-6
before the bases update; cosines normalise x with a 1e-12 floor on the norm in
the loop and the bases with a 1e-6 floor. All solvers compute in at least
float32.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from attention_lab.ops import _checks

GRADIENTS = ("one_step", "bptt")
DISTRIBUTIONS = ("uniform", "normal")
_NORM_EPS = 1e-6  # floor of the bases' norm (F.normalize(bases, eps=1e-6))
_X_NORM_EPS = 1e-12  # floor of the tokens' norm in the loops (F.normalize's default)
_MASS_EPS = 1e-6  # added to the codes' mass over the tokens (VQ, CD)


def _repeat(count: int, body: Callable, state, unroll: bool):
  """`lax.fori_loop(0, count, body, state)`; with unroll, `count` calls of body traced in turn."""
  if not unroll:
    return lax.fori_loop(0, count, body, state)
  for i in range(count):
    state = body(i, state)
  return state


def fixed_point_iterate(step: Callable, state, operands=(), *, steps: int,
                        gradient: str = "one_step", unroll: bool = False):
  """Applies `state = step(state, *operands)` `steps` times.

  gradient="bptt": a differentiable loop (reverse mode stores every
  iteration's residuals: memory O(steps)). gradient="one_step": the first
  steps−1 applications run on `stop_gradient` copies of state and operands,
  and the last application sees the frozen state but live operands, so the
  derivative is that of one step at the fixed point (Ham paper Eq. 13):
  backward memory O(1) in `steps`. Works for any fixed-point iteration. (The
  Hamburger solvers freeze the whole loop instead and differentiate only
  their final codes update, as HamNet does: see `_loop_then_final`.)

  Args:
    step: (state, *operands) -> state, with the same pytree structure.
    state: initial state pytree.
    operands: tuple of arrays the step reads (e.g. the input x).
    steps: number of applications, ≥ 1.
    gradient: "one_step" or "bptt".
    unroll: a Python loop instead of `lax.fori_loop` (see the module docstring).
  """
  _checks.check_positive("steps", steps, integer=True)
  _checks.check_choice("gradient", gradient, GRADIENTS)
  operands = tuple(operands)
  if gradient == "bptt":
    return _repeat(steps, lambda _, s: step(s, *operands), state, unroll)
  frozen = lax.stop_gradient(operands)
  state = _repeat(steps - 1, lambda _, s: step(s, *frozen), lax.stop_gradient(state), unroll)
  return step(state, *operands)


def random_bases(key, batch: int, dim: int, rank: int, *, distribution: str = "uniform",
                 dtype=jnp.float32):
  """Draws (batch, dim, rank) bases, each column L2-normalised over dim.

  "uniform" (the NMF reference: U(0, 1), non-negative) or "normal" (VQ/CD).
  """
  _checks.check_choice("distribution", distribution, DISTRIBUTIONS)
  for name, value in (("batch", batch), ("dim", dim), ("rank", rank)):
    _checks.check_positive(name, value, integer=True)
  sample = jax.random.uniform if distribution == "uniform" else jax.random.normal
  bases = sample(key, (batch, dim, rank), jnp.float32)
  return _l2_normalize(bases, axis=1).astype(dtype)


def _l2_normalize(x, axis, eps=_NORM_EPS):
  """x / max(‖x‖, eps) along axis (torch's F.normalize)."""
  sq = jnp.sum(jnp.square(x), axis=axis, keepdims=True)
  return x * lax.rsqrt(jnp.maximum(sq, eps**2))


def _check_problem(x, bases, steps, gradient):
  _checks.check_rank("x", x, 3, "(batch, tokens, dim)")
  _checks.check_rank("bases", bases, 3, "(batch, dim, rank)")
  if bases.shape[:2] != (x.shape[0], x.shape[2]):
    raise ValueError(
        f"bases must have shape (batch, dim, rank) = ({x.shape[0]}, {x.shape[2]}, R)"
        f" matching x {x.shape}, got {bases.shape}")
  _checks.check_positive("steps", steps, integer=True)
  _checks.check_choice("gradient", gradient, GRADIENTS)


def _check_temperature(temperature):
  if isinstance(temperature, (int, float)) and not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")


def _tokens_t_codes(x, codes):
  """xᵀ codes (B, D, R) for x (B, N, D), codes (B, N, R), as the transpose of codesᵀ x.

  Both contract the token axis in place (no transposed copy of x, which
  `swapaxes(x) @ codes` makes XLA:CPU take inside the solver loop on every
  step). The (R, D) product keeps x's minor axis D as the output's minor
  axis, which XLA:CPU runs faster than the (D, R) one; only the small (R, D)
  result is transposed (experiments/results/performance_goals.md, section 3).
  """
  return jnp.swapaxes(jnp.einsum("bnr,bnd->brd", codes, x), 1, 2)


def _loop_then_final(update, final, state, operands, *, steps, gradient, unroll):
  """`steps` applications of `update`, then `final(state, *operands)` (the codes).

  gradient="one_step": the loop sees only `stop_gradient` copies of state and
  operands and its output is frozen, so derivatives reach the operands through
  `final` alone (HamNet: `torch.no_grad()` loop, then `compute_coef`).
  gradient="bptt": the loop is differentiated too.
  """
  operands = tuple(operands)
  if gradient == "one_step":
    state = lax.stop_gradient(fixed_point_iterate(
        update, lax.stop_gradient(state), lax.stop_gradient(operands), steps=steps,
        gradient="bptt", unroll=unroll))
  else:
    state = fixed_point_iterate(update, state, operands, steps=steps, gradient="bptt",
                                unroll=unroll)
  return state, final(state, *operands)


# Tokens per block of the NMF pass: a (block, D) slice of x stays in cache for both of the
# step's products (at D = 512, 2048 tokens are 4 MiB in float32).
_NMF_BLOCK_TOKENS = 2048


def _nmf_step(x, bases, codes, *, eps, initial, unroll):
  """One multiplicative (codes, bases) step of Alg. 2 as a single pass over x.

  For each block of tokens x_i: codes_i ← codes_i ⊙ (x_i bases) / (codes_i
  basesᵀbases + eps) (with initial=True codes_i first starts as
  softmax(x_i bases)), accumulating codesᵀx and codesᵀcodes; then bases ←
  bases ⊙ (codesᵀx)ᵀ / (bases codesᵀcodes + eps). The same arithmetic as the
  unblocked step, but x is read once per step instead of twice, and both
  products run on a block while it is in cache.
  """
  b, n, d = x.shape
  gram = jnp.swapaxes(bases, 1, 2) @ bases

  def block(x_i, codes_i):
    x_bases = x_i @ bases
    if initial:
      codes_i = jax.nn.softmax(x_bases, axis=-1)
    codes_i = codes_i * x_bases / (codes_i @ gram + eps)
    return codes_i, jnp.einsum("bnr,bnd->brd", codes_i, x_i), jnp.swapaxes(codes_i, 1, 2) @ codes_i

  size = min(_NMF_BLOCK_TOKENS, n)
  full = n // size

  def body(i, carry):
    codes, num, cc = carry
    start = i * size
    codes_i, num_i, cc_i = block(lax.dynamic_slice_in_dim(x, start, size, axis=1),
                                 lax.dynamic_slice_in_dim(codes, start, size, axis=1))
    return lax.dynamic_update_slice_in_dim(codes, codes_i, start, axis=1), num + num_i, cc + cc_i

  rank = bases.shape[-1]
  carry = (codes, jnp.zeros((b, rank, d), x.dtype), jnp.zeros((b, rank, rank), x.dtype))
  codes, num, cc = body(0, carry) if full == 1 else _repeat(full, body, carry, unroll)
  if full * size < n:  # the last, shorter block
    codes_i, num_i, cc_i = block(x[:, full * size:], codes[:, full * size:])
    codes = lax.dynamic_update_slice_in_dim(codes, codes_i, full * size, axis=1)
    num, cc = num + num_i, cc + cc_i
  bases = bases * jnp.swapaxes(num, 1, 2) / (bases @ cc + eps)
  return bases, codes


def nmf(x, bases, *, steps, eps=1e-6, gradient="one_step", unroll=False):
  """Non-negative matrix factorisation by multiplicative updates (Ham Alg. 2).

  min ‖X − C Dᵀ‖_F s.t. C, D ≥ 0, with x ≈ codes @ basesᵀ. Codes start as
  softmax_R(x bases). Each of the `steps` loop updates:
    codes ← codes ⊙ (x bases) / (codes basesᵀbases + eps)
    bases ← bases ⊙ (xᵀ codes) / (bases codesᵀcodes + eps),
  then the final codes update (the reference's `compute_coef`) is one more
  codes update from the final bases; those codes are returned. The objective
  does not increase (Lee & Seung) and every iterate stays non-negative.
  **x must be non-negative** (the Hamburger applies ReLU first) and so must the
  initial bases (`random_bases(..., "uniform")`). An all-zero x gives all-zero
  codes and bases, finite.

  Each step is one pass over x in blocks of tokens (`_nmf_step`), so the
  solver reads x steps + 1 times. Time O(steps·B·(N·D·R + (N+D)·R²)); memory
  O(B·(N+D)·R) beyond x; with gradient="one_step" the backward pass is that of
  the final codes update (one N·D·R product), whatever `steps`.

  Args:
    x: (B, N, D) non-negative tokens.
    bases: (B, D, R) non-negative initial bases.
    steps: number of loop (codes, bases) updates, ≥ 1.
    eps: denominator floor.
    gradient: "one_step" or "bptt" (see the module docstring).
    unroll: Python loops instead of `lax.fori_loop` (see the module docstring).

  Returns:
    (bases (B, D, R) after the loop, final codes (B, N, R)) in x's dtype.
  """
  _check_problem(x, bases, steps, gradient)
  _checks.check_positive("eps", eps)
  acc = _checks.compute_dtype(x, bases)
  x32, bases32 = x.astype(acc), bases.astype(acc)

  def update(state, x):
    return _nmf_step(x, *state, eps=eps, initial=False, unroll=unroll)

  def final(state, x):  # the reference's compute_coef: one more codes update
    bases, codes = state
    return codes * (x @ bases) / (codes @ (jnp.swapaxes(bases, 1, 2) @ bases) + eps)

  # The first step also draws the initial codes softmax(x bases) in its pass over x.
  first = lambda x, bases: _nmf_step(x, bases, jnp.zeros(x.shape[:2] + bases.shape[-1:], acc),
                                     eps=eps, initial=True, unroll=unroll)
  if gradient == "one_step":
    state = lax.stop_gradient(first(*lax.stop_gradient((x32, bases32))))
  else:
    state = first(x32, bases32)
  if steps > 1:
    state, codes = _loop_then_final(update, final, state, (x32,), steps=steps - 1,
                                    gradient=gradient, unroll=unroll)
  else:
    codes = final(state, x32)
  bases32 = state[0]
  return bases32.astype(x.dtype), codes.astype(x.dtype)


def _cosine_codes(x_unit, bases, temperature):
  return jax.nn.softmax((x_unit @ bases) / temperature, axis=-1)


def _mass_normalised(codes):
  """codes / (Σ_N codes + 1e-6): each basis' weights over the tokens sum to ~1."""
  return codes / (jnp.sum(codes, axis=1, keepdims=True) + _MASS_EPS)


def soft_vq(x, bases, *, steps, temperature, gradient="one_step", unroll=False):
  """Soft vector quantisation (Ham Alg. 1): a differentiable K-means.

  Each loop update: codes ← softmax_R(cos(x, bases)/T); bases ← xᵀ codes
  diag(Σ_n codes + 1e-6)⁻¹ (the code-weighted token means). The final codes
  update (the reference's `compute_coef`) is softmax_R(x̂ unit(bases)/T) with
  x̂ = x / (‖x‖ + 1e-6); as in HamNet, with gradient="one_step" ‖x‖ is
  frozen there (the reference computes it under `no_grad`), with "bptt" it is
  differentiated. T → 0 gives hard assignments.

  Time O((steps + 1)·B·N·D·R); memory O(B·(N+D)·R) beyond x.

  Args:
    x: (B, N, D) tokens.
    bases: (B, D, R) initial bases (e.g. `random_bases(..., "normal")`).
    steps: number of loop (codes, bases) updates, ≥ 1.
    temperature: softmax temperature T > 0 (the reference's inverse
      temperature is 100: T = 0.01).
    gradient: "one_step" or "bptt" (see the module docstring).
    unroll: Python loops instead of `lax.fori_loop` (see the module docstring).

  Returns:
    (bases (B, D, R) after the loop, final codes (B, N, R)) in x's dtype.
  """
  _check_problem(x, bases, steps, gradient)
  _check_temperature(temperature)
  acc = _checks.compute_dtype(x, bases)
  x32, bases32 = x.astype(acc), bases.astype(acc)

  def update(bases, x, x_unit):
    codes = _mass_normalised(_cosine_codes(x_unit, _l2_normalize(bases, axis=1), temperature))
    return _tokens_t_codes(x, codes)

  def final(bases, x, _):
    norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=2, keepdims=True))
    if gradient == "one_step":
      norm = lax.stop_gradient(norm)
    return _cosine_codes(x / (norm + 1e-6), _l2_normalize(bases, axis=1), temperature)

  x_unit = _l2_normalize(x32, axis=2, eps=_X_NORM_EPS)
  bases32, codes = _loop_then_final(update, final, bases32, (x32, x_unit), steps=steps,
                                    gradient=gradient, unroll=unroll)
  return bases32.astype(x.dtype), codes.astype(x.dtype)


def soft_cd(x, bases, *, steps, temperature, beta, gradient="one_step", unroll=False):
  """Soft concept decomposition (Ham Alg. 3, Eq. 14).

  Each loop update: codes ← softmax_R(x̂ bases / T) with x̂ the unit tokens
  (the bases are used as they are: unit columns after every update, and the
  initial ones from `random_bases`); bases ← unit columns of xᵀ codes
  diag(Σ_n codes + 1e-6)⁻¹ (spherical K-means). The final codes update (the
  reference's `compute_coef`) is the ridge solution
  codes = x bases (basesᵀbases + βI)⁻¹.

  Time O((steps + 1)·B·N·D·R + B·R³); memory O(B·(N+D)·R) beyond x.

  Args:
    x: (B, N, D) tokens.
    bases: (B, D, R) initial bases.
    steps: number of loop (codes, bases) updates, ≥ 1.
    temperature: softmax temperature T > 0 (the reference's inverse
      temperature is 100: T = 0.01).
    beta: ridge weight β > 0 (the paper: 0.01 or 0.1 make no difference).
    gradient: "one_step" or "bptt" (see the module docstring).
    unroll: Python loops instead of `lax.fori_loop` (see the module docstring).

  Returns:
    (bases (B, D, R) after the loop, final codes (B, N, R)) in x's dtype.
  """
  _check_problem(x, bases, steps, gradient)
  _check_temperature(temperature)
  if isinstance(beta, (int, float)) and not beta > 0:
    raise ValueError(f"beta must be > 0, got {beta!r}")
  acc = _checks.compute_dtype(x, bases)
  x32, bases32 = x.astype(acc), bases.astype(acc)

  def update(bases, x, x_unit):
    codes = _mass_normalised(_cosine_codes(x_unit, bases, temperature))
    return _l2_normalize(_tokens_t_codes(x, codes), axis=1)

  def final(bases, x, _):
    gram = jnp.swapaxes(bases, 1, 2) @ bases + beta * jnp.eye(bases.shape[-1], dtype=acc)
    # gram is symmetric, so codes = (x bases) gram⁻¹ = (gram⁻¹ (x bases)ᵀ)ᵀ.
    return jnp.swapaxes(jnp.linalg.solve(gram, jnp.swapaxes(x @ bases, 1, 2)), 1, 2)

  x_unit = _l2_normalize(x32, axis=2, eps=_X_NORM_EPS)
  bases32, codes = _loop_then_final(update, final, bases32, (x32, x_unit), steps=steps,
                                    gradient=gradient, unroll=unroll)
  return bases32.astype(x.dtype), codes.astype(x.dtype)
