"""Matrix decompositions of the Hamburger "ham" (Ham paper Alg. 1-3, Eq. 13).

x (B, N, D) holds N tokens of dimension D (the paper's X is D×N, we use its
transpose); bases (B, D, R) is the dictionary D; codes (B, N, R) is Cᵀ. The
low-rank reconstruction is codes @ basesᵀ (B, N, D). Each of `steps` updates
recomputes the codes, then the bases from the new codes.

One-step gradient (Eq. 13): with gradient="one_step", all updates but the last
run on frozen inputs (`jax.lax.stop_gradient`), so the backward pass sees only
∂F/∂x of the last update at the (numerically converged) state; memory and time
of the backward pass do not grow with `steps`. gradient="bptt" differentiates
through every update. Values never depend on `gradient`.

Choices from the reference code (the paper leaves them open): codes start as
softmax(inv_t·x·bases) over R with inv_t = 1 for NMF and 1/temperature for
VQ/CD; NMF multiplicative updates use eps = 1e-6 in the denominators; VQ
divides by the code mass + 1e-6; cosines use L2 normalisation with a 1e-6
floor on the norm. All solvers compute in at least float32.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from attention_lab.ops import _checks

GRADIENTS = ("one_step", "bptt")
DISTRIBUTIONS = ("uniform", "normal")
_NORM_EPS = 1e-6


def fixed_point_iterate(step: Callable, state, operands=(), *, steps: int,
                        gradient: str = "one_step"):
  """Applies `state = step(state, *operands)` `steps` times.

  gradient="bptt": a differentiable loop (reverse mode stores every
  iteration's residuals: memory O(steps)). gradient="one_step": the first
  steps−1 applications run on `stop_gradient` copies of state and operands,
  and the last application sees the frozen state but live operands, so the
  derivative is that of one step at the fixed point (Ham paper Eq. 13):
  backward memory O(1) in `steps`. Works for any fixed-point iteration.

  Args:
    step: (state, *operands) -> state, with the same pytree structure.
    state: initial state pytree.
    operands: tuple of arrays the step reads (e.g. the input x).
    steps: number of applications, ≥ 1.
    gradient: "one_step" or "bptt".
  """
  _checks.check_positive("steps", steps, integer=True)
  _checks.check_choice("gradient", gradient, GRADIENTS)
  operands = tuple(operands)
  if gradient == "bptt":
    return lax.fori_loop(0, steps, lambda _, s: step(s, *operands), state)
  frozen = lax.stop_gradient(operands)
  state = lax.fori_loop(0, steps - 1, lambda _, s: step(s, *frozen),
                        lax.stop_gradient(state))
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


def _l2_normalize(x, axis):
  sq = jnp.sum(jnp.square(x), axis=axis, keepdims=True)
  return x * lax.rsqrt(jnp.maximum(sq, _NORM_EPS**2))


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
  axis, and XLA:CPU runs it about 1.4× faster than the (D, R) one (at
  16384×512, R = 64: 8.0 vs 11.1 ms); only the small (R, D) result is
  transposed (experiments/results/performance_goals.md, section 3).
  """
  return jnp.swapaxes(jnp.einsum("bnr,bnd->brd", codes, x), 1, 2)


def _initial_codes(x, bases, inv_t):
  return jax.nn.softmax(inv_t * (x @ bases), axis=-1)


def nmf(x, bases, *, steps, eps=1e-6, gradient="one_step"):
  """Non-negative matrix factorisation by multiplicative updates (Ham Alg. 2).

  min ‖X − C Dᵀ‖_F s.t. C, D ≥ 0, with x ≈ codes @ basesᵀ. Each step:
    codes ← codes ⊙ (x bases) / (codes basesᵀbases + eps)
    bases ← bases ⊙ (xᵀ codes) / (bases codesᵀcodes + eps).
  The objective does not increase (Lee & Seung) and every iterate stays
  non-negative. **x must be non-negative** (the Hamburger applies ReLU first)
  and so must the initial bases (`random_bases(..., "uniform")`). An all-zero x
  gives all-zero codes and bases, finite.

  Time O(steps·B·(N·D·R + (N+D)·R²)); memory O(B·(N+D)·R) beyond x; with
  gradient="one_step" the backward pass is that of one step.

  Args:
    x: (B, N, D) non-negative tokens.
    bases: (B, D, R) non-negative initial bases.
    steps: number of (codes, bases) updates, ≥ 1.
    eps: denominator floor.
    gradient: "one_step" or "bptt".

  Returns:
    (bases (B, D, R), codes (B, N, R)) in x's dtype.
  """
  _check_problem(x, bases, steps, gradient)
  _checks.check_positive("eps", eps)
  acc = _checks.compute_dtype(x, bases)
  x32, bases32 = x.astype(acc), bases.astype(acc)

  def update(state, x):
    bases, codes = state
    codes = codes * (x @ bases) / (codes @ (jnp.swapaxes(bases, 1, 2) @ bases) + eps)
    bases = bases * _tokens_t_codes(x, codes) / (
        bases @ (jnp.swapaxes(codes, 1, 2) @ codes) + eps)
    return bases, codes

  state = (bases32, _initial_codes(x32, bases32, 1.0))
  bases32, codes = fixed_point_iterate(update, state, (x32,), steps=steps, gradient=gradient)
  return bases32.astype(x.dtype), codes.astype(x.dtype)


def soft_vq(x, bases, *, steps, temperature, gradient="one_step"):
  """Soft vector quantisation (Ham Alg. 1): a differentiable K-means.

  Each step: codes ← softmax_R(cosine(x, bases)/T);
  bases ← xᵀ codes diag(Σ_n codes + 1e-6)⁻¹ (the code-weighted token means).
  T → 0 gives hard assignments.

  Time O(steps·B·N·D·R); memory O(B·(N+D)·R) beyond x.

  Args:
    x: (B, N, D) tokens.
    bases: (B, D, R) initial bases (e.g. `random_bases(..., "normal")`).
    steps: number of (codes, bases) updates, ≥ 1.
    temperature: softmax temperature T > 0 (the reference uses 0.01).
    gradient: "one_step" or "bptt".

  Returns:
    (bases (B, D, R), codes (B, N, R)) in x's dtype.
  """
  _check_problem(x, bases, steps, gradient)
  _check_temperature(temperature)
  acc = _checks.compute_dtype(x, bases)
  x32, bases32 = x.astype(acc), bases.astype(acc)

  def update(state, x, x_unit):
    bases, _ = state
    codes = jax.nn.softmax((x_unit @ _l2_normalize(bases, axis=1)) / temperature, axis=-1)
    mass = jnp.sum(codes, axis=1, keepdims=True)
    return _tokens_t_codes(x, codes) / (mass + 1e-6), codes

  state = (bases32, _initial_codes(x32, bases32, 1.0 / temperature))
  bases32, codes = fixed_point_iterate(
      update, state, (x32, _l2_normalize(x32, axis=2)), steps=steps, gradient=gradient)
  return bases32.astype(x.dtype), codes.astype(x.dtype)


def soft_cd(x, bases, *, steps, temperature, beta, gradient="one_step"):
  """Soft concept decomposition (Ham Alg. 3, Eq. 14).

  Each step: codes ← softmax_R(cosine(x, bases)/T); bases ← unit columns of
  xᵀ codes (spherical K-means). After the loop the codes are the ridge solution
  codes = x bases (basesᵀbases + βI)⁻¹, which is always differentiated.

  Time O(steps·B·N·D·R + B·R³); memory O(B·(N+D)·R) beyond x.

  Args:
    x: (B, N, D) tokens.
    bases: (B, D, R) initial bases.
    steps: number of (codes, bases) updates, ≥ 1.
    temperature: softmax temperature T > 0 (the reference uses 0.01).
    beta: ridge weight β > 0 (the paper: 0.01 or 0.1 make no difference).
    gradient: "one_step" or "bptt".

  Returns:
    (bases (B, D, R), codes (B, N, R)) in x's dtype.
  """
  _check_problem(x, bases, steps, gradient)
  _check_temperature(temperature)
  if isinstance(beta, (int, float)) and not beta > 0:
    raise ValueError(f"beta must be > 0, got {beta!r}")
  acc = _checks.compute_dtype(x, bases)
  x32, bases32 = x.astype(acc), bases.astype(acc)

  def update(state, x, x_unit):
    bases, _ = state
    codes = jax.nn.softmax((x_unit @ _l2_normalize(bases, axis=1)) / temperature, axis=-1)
    return _l2_normalize(_tokens_t_codes(x, codes), axis=1), codes

  state = (bases32, _initial_codes(x32, bases32, 1.0 / temperature))
  bases32, _ = fixed_point_iterate(
      update, state, (x32, _l2_normalize(x32, axis=2)), steps=steps, gradient=gradient)
  rank = bases32.shape[-1]
  gram = jnp.swapaxes(bases32, 1, 2) @ bases32 + beta * jnp.eye(rank, dtype=acc)
  # gram is symmetric, so codes = (x bases) gram⁻¹ = (gram⁻¹ (x bases)ᵀ)ᵀ.
  codes = jnp.swapaxes(jnp.linalg.solve(gram, jnp.swapaxes(x32 @ bases32, 1, 2)), 1, 2)
  return bases32.astype(x.dtype), codes.astype(x.dtype)
