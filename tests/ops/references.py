"""Naive float64 numpy references for the operators: explicit loops and full matrices."""

import numpy as np


def softmax(x, axis=-1):
  x = x - x.max(axis=axis, keepdims=True)
  e = np.exp(x)
  return e / e.sum(axis=axis, keepdims=True)


def attention(q, k, v, scale, bias=None, normalization="softmax"):
  """Per (batch, head) loops over explicit (Nq, Nk) score matrices."""
  b, nq, h, _ = q.shape
  out = np.zeros((b, nq, h, v.shape[-1]))
  for i in range(b):
    for j in range(h):
      scores = scale * q[i, :, j] @ k[i, :, j].T
      if bias is not None:
        scores = scores + np.broadcast_to(bias, (b, h) + scores.shape)[i, j]
      coef = softmax(scores) if normalization == "softmax" else scores / k.shape[1]
      out[i, :, j] = coef @ v[i, :, j]
  return out


def avg_pool_grid(x, window):
  """Loop-based average pooling of (B, *S, H, D) with stride = window, partial edges kept."""
  spatial = x.shape[1:-2]
  out_shape = tuple(-(-s // window) for s in spatial)
  out = np.zeros((x.shape[0],) + out_shape + x.shape[-2:])
  for idx in np.ndindex(*out_shape):
    sl = tuple(slice(i * window, min((i + 1) * window, s)) for i, s in zip(idx, spatial))
    block = x[(slice(None),) + sl]
    out[(slice(None),) + idx] = block.reshape(x.shape[0], -1, *x.shape[-2:]).mean(axis=1)
  return out.reshape(x.shape[0], -1, *x.shape[-2:])


def relative_logits(q, rel_h, rel_w):
  b, nx, ny, h, _ = q.shape
  lh = np.zeros((b, h, nx, ny, nx))
  lw = np.zeros((b, h, nx, ny, ny))
  for x in range(nx):
    for y in range(ny):
      for x2 in range(nx):
        lh[:, :, x, y, x2] = q[:, x, y] @ rel_h[x2 - x + nx - 1]
      for y2 in range(ny):
        lw[:, :, x, y, y2] = q[:, x, y] @ rel_w[y2 - y + ny - 1]
  return lh, lw


def relative_attention(q, k, v, rel_h, rel_w, scale):
  """softmax over (x', y') of scale·q_xy·(k_x'y' + rel_h[x'-x+X-1] + rel_w[y'-y+Y-1])."""
  b, nx, ny, h, _ = q.shape
  out = np.zeros(q.shape[:4] + v.shape[-1:])
  for x in range(nx):
    for y in range(ny):
      keys = np.zeros((b, nx, ny, h, q.shape[-1]))
      for x2 in range(nx):
        for y2 in range(ny):
          keys[:, x2, y2] = k[:, x2, y2] + rel_h[x2 - x + nx - 1] + rel_w[y2 - y + ny - 1]
      logits = scale * np.einsum("bhd,buvhd->bhuv", q[:, x, y], keys).reshape(b, h, -1)
      weights = softmax(logits)
      out[:, x, y] = np.einsum("bhn,bnhe->bhe", weights, v.reshape(b, nx * ny, h, -1))
  return out


def siamese(q, k, v, w, global_term=True):
  """(1/N) Σ_j v_j s_ij with the explicit (Nq, N) Siamese score matrix per head."""
  b, nq, h, _ = q.shape
  out = np.zeros((b, nq, h, v.shape[-1]))
  for i in range(b):
    for j in range(h):
      sq = q[i, :, j] @ w[j]
      sk = k[i, :, j] @ w[j] if global_term else np.zeros(k.shape[1])
      scores = sq[:, None] + sk[None, :]
      out[i, :, j] = scores @ v[i, :, j] / k.shape[1]
  return out


def kronecker_summary(x):
  """Loops: for each mode m and index s, the mean over all positions with s_m = s."""
  spatial = x.shape[1:-1]
  parts = []
  for mode, size in enumerate(spatial):
    part = np.zeros((x.shape[0], size, x.shape[-1]))
    for s in range(size):
      sl = [slice(None)] * x.ndim
      sl[1 + mode] = s
      part[:, s] = x[tuple(sl)].reshape(x.shape[0], -1, x.shape[-1]).mean(axis=1)
    parts.append(part)
  return np.concatenate(parts, axis=1)


def head_summary(x):
  merged = x.reshape(*x.shape[:-2], -1)
  return kronecker_summary(merged).reshape(x.shape[0], -1, *x.shape[-2:])


def kronecker_kv(q, k, v, scale):
  flat_q = q.reshape(q.shape[0], -1, *q.shape[-2:])
  out = attention(flat_q, head_summary(k), head_summary(v), scale)
  return out.reshape(*q.shape[:-1], v.shape[-1])


def kronecker_qkv(q, k, v, scale):
  summary = attention(head_summary(q), head_summary(k), head_summary(v), scale)
  spatial = q.shape[1:-2]
  offsets = np.cumsum((0,) + spatial)
  out = np.zeros(q.shape[:-1] + v.shape[-1:])
  for idx in np.ndindex(*spatial):
    term = sum(summary[:, offsets[m] + idx[m]] for m in range(len(spatial)))
    out[(slice(None),) + idx] = term
  return out


def _cosine(x, bases):
  xn = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-6)
  bn = bases / np.maximum(np.linalg.norm(bases, axis=0, keepdims=True), 1e-6)
  return xn @ bn


def nmf(x, bases, steps, eps=1e-6):
  """Ham Alg. 2 per batch element, with the DESIGN.md conventions."""
  out_b, out_c = [], []
  for xb, db in zip(x, bases):
    c = softmax(xb @ db)
    for _ in range(steps):
      c = c * (xb @ db) / (c @ db.T @ db + eps)
      db = db * (xb.T @ c) / (db @ c.T @ c + eps)
    out_b.append(db)
    out_c.append(c)
  return np.stack(out_b), np.stack(out_c)


def soft_vq(x, bases, steps, temperature):
  out_b, out_c = [], []
  for xb, db in zip(x, bases):
    c = softmax(xb @ db / temperature)
    for _ in range(steps):
      c = softmax(_cosine(xb, db) / temperature)
      db = (xb.T @ c) / (c.sum(axis=0, keepdims=True) + 1e-6)
    out_b.append(db)
    out_c.append(c)
  return np.stack(out_b), np.stack(out_c)


def soft_cd(x, bases, steps, temperature, beta):
  out_b, out_c = [], []
  for xb, db in zip(x, bases):
    for _ in range(steps):
      c = softmax(_cosine(xb, db) / temperature)
      db = xb.T @ c
      db = db / np.maximum(np.linalg.norm(db, axis=0, keepdims=True), 1e-6)
    c = xb @ db @ np.linalg.inv(db.T @ db + beta * np.eye(db.shape[1]))
    out_b.append(db)
    out_c.append(c)
  return np.stack(out_b), np.stack(out_c)
