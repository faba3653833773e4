"""The memory-bound ops compile without input-sized transposed copies (the performance goals of experiments/results/performance_goals.md).

XLA:CPU turns a dot whose batch or contracting axes it cannot take in place
into a `transpose` + `copy` of the operand: for SAO one more read and write of
the whole input, for the decomposition solvers one per solver step (the old
`swapaxes(x) @ codes`). These tests read the optimised HLO and fail if an
input-sized array is transposed or copied.
"""

import math
import re

import jax
import jax.numpy as jnp
import pytest

from attention_lab import ops

_SHAPED_OP = re.compile(r"= \w+\[([\d,]*)\]\S* (?:transpose|copy)\(")


def _largest_relayout(fn, *args):
  """Elements of the largest array the compiled fn transposes or copies (0 if none)."""
  text = jax.jit(fn).lower(*args).compile().as_text()
  sizes = [math.prod(int(d) for d in m.group(1).split(",") if d)
           for m in _SHAPED_OP.finditer(text)]
  return max(sizes, default=0)


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("global_term", [True, False])
def test_siamese_attention_copies_no_input_sized_array(heads, global_term):
  n, channels = 256, 32
  x = jnp.ones((2, n, heads, channels // heads), jnp.float32)
  w = jnp.ones((heads, channels // heads), jnp.float32)
  largest = _largest_relayout(
      lambda x: ops.siamese_attention(x, x, x, w, global_term=global_term), x)
  assert largest < n, largest  # at most per-head statistics, never (N, ·) arrays


@pytest.mark.parametrize("solver", ["nmf", "soft_vq", "soft_cd"])
def test_decomposition_copies_no_transposed_input(solver):
  n, d, r = 256, 32, 4
  x = jnp.ones((1, n, d), jnp.float32)
  bases = ops.random_bases(jax.random.key(0), 1, d, r)
  fns = {"nmf": lambda x, b: ops.nmf(x, b, steps=3),
         "soft_vq": lambda x, b: ops.soft_vq(x, b, steps=3, temperature=0.5),
         "soft_cd": lambda x, b: ops.soft_cd(x, b, steps=3, temperature=0.5, beta=0.1)}
  assert _largest_relayout(fns[solver], x, bases) < n * d


def test_blocked_nmf_copies_no_input_sized_array(monkeypatch):
  """With several token blocks per step, only block-sized slices are copied."""
  from attention_lab.ops import decomposition  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(decomposition, "_NMF_BLOCK_TOKENS", 64)
  n, d, r = 256, 32, 4
  x = jnp.ones((2, n, d), jnp.float32)
  bases = ops.random_bases(jax.random.key(0), 2, d, r)
  assert _largest_relayout(lambda x, b: ops.nmf(x, b, steps=3), x, bases) < n * d
