"""Trace-time argument checks shared by the operators (raise ValueError)."""

import numbers
from collections.abc import Sequence

import jax.numpy as jnp


def check_rank(name: str, x, rank: int, layout: str) -> None:
  if x.ndim != rank:
    raise ValueError(f"{name} must have shape {layout} (rank {rank}), got {x.shape}")


def check_min_rank(name: str, x, rank: int, layout: str) -> None:
  if x.ndim < rank:
    raise ValueError(f"{name} must have shape {layout} (rank >= {rank}), got {x.shape}")


def check_dims(names: Sequence[str], arrays, axes: Sequence[int], what: str) -> None:
  """Checks that `arrays[i].shape[axes[i]]` agree."""
  sizes = [a.shape[ax] for a, ax in zip(arrays, axes)]
  if len(set(sizes)) > 1:
    got = ", ".join(f"{n}: {s}" for n, s in zip(names, sizes))
    raise ValueError(f"{what} must agree between {' and '.join(names)}; got {got}")


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
  if value not in choices:
    raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def check_positive(name: str, value, *, integer: bool = False) -> None:
  if integer and (not isinstance(value, numbers.Integral) or isinstance(value, bool)):
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  if not value > 0:
    raise ValueError(f"{name} must be > 0, got {value!r}")


def check_chunk(query_chunk_size) -> None:
  if query_chunk_size is not None:
    check_positive("query_chunk_size", query_chunk_size, integer=True)


def compute_dtype(*arrays):
  """float32 for low-precision inputs (accumulation dtype), else the input dtype."""
  dtype = jnp.result_type(*arrays)
  return jnp.promote_types(dtype, jnp.float32)
