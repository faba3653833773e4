import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax.test_util import check_grads, check_jvp, check_vjp

from attention_lab import ops
from attention_lab.ops import decomposition
from tests.ops import references as ref

# (B, N, D, R): odd sizes, a single token, rank above and below the dimension.
SHAPES = [(2, 30, 8, 4), (1, 7, 5, 3), (1, 1, 3, 2), (1, 9, 3, 6)]

# The tests jit what they call (random_bases, the solvers, their gradients): run eagerly, each
# jnp primitive inside them is its own XLA compile per shape (seconds in all on a GPU).
random_bases = jax.jit(ops.random_bases, static_argnums=(1, 2, 3),
                       static_argnames=("distribution", "dtype"))


def _problem(rng, b, n, d, r, non_negative=True):
  x = rng.normal(size=(b, n, d))
  x = np.abs(x) if non_negative else x
  bases = np.asarray(random_bases(jax.random.key(1), b, d, r, dtype=jnp.float64))
  return x, bases


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("steps", [1, 4])
def test_nmf_matches_reference(rng, shape, steps):
  x, bases = _problem(rng, *shape)
  out = jax.jit(lambda x, b: ops.nmf(x, b, steps=steps))(x, bases)
  for got, expected in zip(out, ref.nmf(x, bases, steps)):
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("block", [4, 7, 15])
def test_nmf_blocked_passes_match_reference(rng, monkeypatch, block):
  """Token blocks of each step's pass: full blocks in a loop, a shorter last one."""
  monkeypatch.setattr(decomposition, "_NMF_BLOCK_TOKENS", block)
  x, bases = _problem(rng, 2, 30, 5, 3)
  for gradient in ("one_step", "bptt"):
    out = jax.jit(lambda x, b: ops.nmf(x, b, steps=3, gradient=gradient))(x, bases)
    for got, expected in zip(out, ref.nmf(x, bases, 3)):
      np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
  check_grads(jax.jit(lambda x: ops.nmf(x, bases, steps=2, gradient="bptt")), (x,), order=1,
              modes=("rev",), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("steps", [1, 3])
def test_soft_vq_matches_reference(rng, shape, steps):
  x, _ = _problem(rng, *shape, non_negative=False)
  bases = rng.normal(size=(shape[0], shape[2], shape[3]))
  out = jax.jit(lambda x, b: ops.soft_vq(x, b, steps=steps, temperature=0.3))(x, bases)
  for got, expected in zip(out, ref.soft_vq(x, bases, steps, 0.3)):
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("steps", [1, 3])
def test_soft_cd_matches_reference(rng, shape, steps):
  x, _ = _problem(rng, *shape, non_negative=False)
  bases = rng.normal(size=(shape[0], shape[2], shape[3]))
  out = jax.jit(lambda x, b: ops.soft_cd(x, b, steps=steps, temperature=0.3, beta=0.1))(x, bases)
  for got, expected in zip(out, ref.soft_cd(x, bases, steps, 0.3, 0.1)):
    np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-10)


def test_nmf_objective_does_not_increase_and_stays_non_negative(rng):
  x, bases = _problem(rng, 2, 40, 12, 5)
  errors = []
  for steps in range(1, 13):
    b, c = jax.jit(lambda x, b: ops.nmf(x, b, steps=steps))(x, bases)
    assert np.all(np.asarray(b) >= 0) and np.all(np.asarray(c) >= 0)
    errors.append(float(jnp.linalg.norm(x - c @ jnp.swapaxes(b, 1, 2))))
  assert all(later <= earlier * (1 + 1e-12) for earlier, later in zip(errors, errors[1:])), errors
  assert errors[-1] < 0.95 * errors[0]  # it actually decreases


def test_nmf_of_zero_input_is_finite():
  x = jnp.zeros((1, 6, 4))
  bases = random_bases(jax.random.key(0), 1, 4, 3, dtype=jnp.float64)
  b, c = jax.jit(lambda x, b: ops.nmf(x, b, steps=3))(x, bases)
  assert np.all(np.isfinite(b)) and np.all(np.isfinite(c))
  for gradient in ("one_step", "bptt"):
    g = jax.jit(jax.grad(lambda x: jnp.sum(ops.nmf(x, bases, steps=3, gradient=gradient)[1])))(x)
    assert np.all(np.isfinite(g))


def _loss(outputs):
  bases, codes = outputs
  return jnp.sum(jnp.sin(3 * codes)) + jnp.sum(jnp.cos(2 * bases))


SOLVERS = {
    "nmf": (lambda x, b, **kw: ops.nmf(x, b, **kw), lambda x, b, s: ref.nmf(x, b, s)),
    "soft_vq": (lambda x, b, **kw: ops.soft_vq(x, b, temperature=0.5, **kw),
                lambda x, b, s: ref.soft_vq(x, b, s, 0.5)),
    "soft_cd": (lambda x, b, **kw: ops.soft_cd(x, b, temperature=0.5, beta=0.1, **kw),
                lambda x, b, s: ref.soft_cd(x, b, s, 0.5, 0.1)),
}


@pytest.mark.parametrize("solver", SOLVERS)
def test_one_step_and_bptt_same_values_different_gradients(rng, solver):
  fn, _ = SOLVERS[solver]
  x, bases = _problem(rng, 1, 12, 5, 3)
  one = jax.jit(lambda x: fn(x, bases, steps=4, gradient="one_step"))(x)
  full = jax.jit(lambda x: fn(x, bases, steps=4, gradient="bptt"))(x)
  for a, b in zip(one, full):  # equal up to float64 rounding of differently fused loops
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
  g_one = jax.jit(jax.grad(lambda x: _loss(fn(x, bases, steps=4, gradient="one_step"))))(x)
  g_full = jax.jit(jax.grad(lambda x: _loss(fn(x, bases, steps=4, gradient="bptt"))))(x)
  # VQ and CD contract fast, so their one-step gradient is close to (but not) the full one.
  assert np.linalg.norm(g_one - g_full) > 1e-6 * np.linalg.norm(g_full)


def _final_update(solver, x, bases, codes, x_norm):
  """The reference's compute_coef written out in jnp, from frozen loop (bases, codes).

  VQ divides x by x_norm + 1e-6, a constant ‖x₀‖ (HamNet computes it under no_grad).
  """
  def unit_columns(a):
    return a / jnp.maximum(jnp.linalg.norm(a, axis=1, keepdims=True), 1e-6)

  if solver == "nmf":
    return codes * (x @ bases) / (codes @ jnp.swapaxes(bases, 1, 2) @ bases + 1e-6)
  if solver == "soft_vq":
    return jax.nn.softmax((x / (x_norm + 1e-6)) @ unit_columns(bases) / 0.5, axis=-1)
  gram = jnp.swapaxes(bases, 1, 2) @ bases + 0.1 * jnp.eye(bases.shape[-1])
  return x @ bases @ jnp.linalg.inv(gram)


def _one_step_definition(solver, x0, bases, steps):
  """x -> (bases, codes): the loop run at x0 and frozen, the final codes update at x.

  Its true derivative at x = x0 is, by definition, the one-step gradient (HamNet), so
  finite differences of it check the library's one-step derivatives.
  """
  _, reference = SOLVERS[solver]
  if solver == "nmf":
    loop_bases, loop_codes = ref.nmf(x0, bases, steps, final=False)
  else:
    loop_bases, loop_codes = reference(x0, bases, steps)[0], None
  x_norm = np.linalg.norm(x0, axis=2, keepdims=True)
  return lambda x: (loop_bases, _final_update(solver, x, loop_bases, loop_codes, x_norm))


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("steps", [1, 3])
def test_one_step_gradient_is_gradient_of_final_codes_update(rng, solver, steps):
  fn, _ = SOLVERS[solver]
  x, bases = _problem(rng, 2, 10, 4, 3)
  definition = jax.jit(_one_step_definition(solver, x, bases, steps))
  library = jax.jit(lambda x: fn(x, bases, steps=steps, gradient="one_step"))
  for got, want in zip(library(x), definition(x)):  # the same values at x
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
  expected = jax.jit(jax.grad(lambda x: _loss(definition(x))))(x)
  got = jax.jit(jax.grad(lambda x: _loss(library(x))))(x)
  np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-10)
  # The initial bases receive no gradient through the frozen loop.
  g_bases = jax.jit(jax.grad(lambda b: _loss(fn(x, b, steps=steps, gradient="one_step"))))(bases)
  np.testing.assert_array_equal(g_bases, 0)


@pytest.mark.parametrize("solver", SOLVERS)
def test_one_step_gradient_against_finite_differences(rng, solver):
  """check_jvp / check_vjp (float64) of the library's one-step derivatives against finite
  differences of its definition: the frozen loop, the final codes update at x."""
  fn, _ = SOLVERS[solver]
  x, bases = _problem(rng, 1, 7, 3, 2)
  definition = jax.jit(_one_step_definition(solver, x, bases, 2))
  library = jax.jit(lambda x: fn(x, bases, steps=2, gradient="one_step"))
  check_jvp(definition, lambda p, t: jax.jvp(library, p, t), (x,),
                          atol=1e-6, rtol=1e-6)
  check_vjp(definition, lambda x: jax.vjp(library, x), (x,), atol=1e-6, rtol=1e-6)


# The official code's layout is (B·S, D, N): ours is its transpose. (B, N, D, R).
OFFICIAL_SHAPES = [(2, 30, 8, 4), (1, 13, 5, 7)]
OFFICIAL = {"nmf": (lambda x, b, **kw: ops.nmf(x, b, **kw), {}),
            "vq": (lambda x, b, **kw: ops.soft_vq(x, b, temperature=0.01, **kw), {}),
            "cd": (lambda x, b, **kw: ops.soft_cd(x, b, temperature=0.01, beta=0.1, **kw), {})}


def official_differences(ham, x, bases, steps):
  """Max relative differences of bases, codes, reconstruction and d⟨G, recon⟩/dx (both
  gradient modes) between the library and the transcription of the official code."""
  fn, _ = OFFICIAL[ham]
  g = np.cos(np.arange(x.size)).reshape(x.shape)  # a fixed cotangent for the reconstruction

  def ours(x, gradient):
    b, c = fn(x, bases, steps=steps, gradient=gradient)
    return b, c, c @ jnp.swapaxes(b, 1, 2)

  def theirs(x, no_grad):
    b, c, recon = ref.official_decomposition(jnp.swapaxes(x, 1, 2), bases, ham, steps,
                                             no_grad=no_grad)
    return b, c, jnp.swapaxes(recon, 1, 2)

  rel = lambda a, b: float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))
  out = dict(zip(("bases", "codes", "recon"), (
      rel(a, b) for a, b in zip(jax.jit(ours, static_argnums=1)(x, "one_step"),
                                jax.jit(theirs, static_argnums=1)(x, True)))))
  for gradient, no_grad in (("one_step", True), ("bptt", False)):
    got = jax.jit(jax.grad(lambda x: jnp.sum(g * ours(x, gradient)[2])))(x)
    want = jax.jit(jax.grad(lambda x: jnp.sum(g * theirs(x, no_grad)[2])))(x)
    out[f"grad_{gradient}"] = rel(got, want)
  return out


@pytest.mark.parametrize("ham", OFFICIAL)
@pytest.mark.parametrize("shape", OFFICIAL_SHAPES)
def test_solvers_equal_the_official_code(rng, ham, shape):
  b, n, d, r = shape
  x = np.abs(rng.normal(size=(b, n, d))) if ham == "nmf" else rng.normal(size=(b, n, d))
  bases = np.asarray(random_bases(jax.random.key(2), b, d, r,
                                  distribution="uniform" if ham == "nmf" else "normal",
                                  dtype=jnp.float64))
  diffs = official_differences(ham, x, bases, steps=4)
  assert max(diffs.values()) < 1e-9, diffs


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_fixed_point_iterate_on_a_contraction(steps):
  step = lambda s, x: 0.5 * s + x
  for gradient, slope in (("one_step", 1.0), ("bptt", 2 * (1 - 0.5**steps))):
    run = lambda x: ops.fixed_point_iterate(step, jnp.zeros(()), (x,), steps=steps,
                                            gradient=gradient)
    np.testing.assert_allclose(jax.jit(run)(3.0), 3.0 * 2 * (1 - 0.5**steps), rtol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.grad(run))(3.0), slope, rtol=1e-12)


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_random_bases(distribution):
  b = random_bases(jax.random.key(3), 2, 7, 4, distribution=distribution)
  assert b.shape == (2, 7, 4) and b.dtype == jnp.float32
  np.testing.assert_allclose(jnp.linalg.norm(b, axis=1), 1, rtol=1e-6)
  if distribution == "uniform":
    assert np.all(np.asarray(b) >= 0)
  else:
    assert np.any(np.asarray(b) < 0)
  np.testing.assert_array_equal(
      b, random_bases(jax.random.key(3), 2, 7, 4, distribution=distribution))
  assert not np.allclose(b, random_bases(jax.random.key(4), 2, 7, 4, distribution=distribution))


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("gradient", ["one_step", "bptt"])
def test_unrolled_loops_give_the_same_values_and_gradients(rng, monkeypatch, solver, gradient):
  monkeypatch.setattr(decomposition, "_NMF_BLOCK_TOKENS", 7)  # NMF's block loop runs too
  fn, reference = SOLVERS[solver]
  x, bases = _problem(rng, 2, 30, 5, 3)
  unrolled = jax.jit(lambda x: fn(x, bases, steps=3, gradient=gradient, unroll=True))
  for got, expected in zip(unrolled(x), reference(x, bases, 3)):
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
  loss = lambda unroll: jax.jit(jax.grad(lambda x: _loss(fn(x, bases, steps=3, gradient=gradient,
                                                            unroll=unroll))))(x)
  np.testing.assert_allclose(loss(True), loss(False), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("solver", SOLVERS)
def test_unrolled_loops_are_counted_step_by_step(rng, solver):
  """XLA's cost_analysis counts a loop body once; unrolled, every step adds the same flops."""
  fn, _ = SOLVERS[solver]
  x, bases = _problem(rng, 1, 12, 5, 3)

  def flops(steps, unroll):
    program = jax.jit(lambda x, b: fn(x, b, steps=steps, unroll=unroll)).lower(x, bases)
    return program.compile().cost_analysis()["flops"]

  one, two, three = (flops(s, True) for s in (2, 3, 4))
  assert three - two == pytest.approx(two - one) and two - one > 0
  assert flops(4, False) < three
