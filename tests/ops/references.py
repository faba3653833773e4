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


def _unit_columns(a, eps):
  """a / max(‖a‖, eps) per column (torch's F.normalize over the first axis)."""
  out = np.empty_like(a)
  for j in range(a.shape[1]):
    out[:, j] = a[:, j] / max(np.sqrt(np.sum(a[:, j] ** 2)), eps)
  return out


def _unit_rows(a, eps):
  return _unit_columns(a.T, eps).T


def _mass_normalised(c):
  out = np.empty_like(c)
  for r in range(c.shape[1]):
    out[:, r] = c[:, r] / (1e-6 + np.sum(c[:, r]))
  return out


def nmf(x, bases, steps, eps=1e-6, final=True):
  """Ham Alg. 2 per batch element: K multiplicative updates, then one more codes update.

  final=False returns the loop's (bases, codes), before the final codes update.
  """
  out_b, out_c = [], []
  for xb, db in zip(x, bases):
    c = softmax(xb @ db)
    for _ in range(steps):
      c = c * (xb @ db) / (c @ db.T @ db + eps)
      db = db * (xb.T @ c) / (db @ c.T @ c + eps)
    if final:  # the reference's compute_coef
      c = c * (xb @ db) / (c @ db.T @ db + eps)
    out_b.append(db)
    out_c.append(c)
  return np.stack(out_b), np.stack(out_c)


def soft_vq(x, bases, steps, temperature):
  """Ham Alg. 1: K (cosine softmax, mass-normalised mean) updates, then the cosine softmax."""
  out_b, out_c = [], []
  for xb, db in zip(x, bases):
    x_unit = _unit_rows(xb, 1e-12)
    for _ in range(steps):
      c = _mass_normalised(softmax(x_unit @ _unit_columns(db, 1e-6) / temperature))
      db = xb.T @ c
    norms = np.array([np.sqrt(np.sum(row ** 2)) for row in xb])
    c = softmax((xb / (1e-6 + norms[:, None])) @ _unit_columns(db, 1e-6) / temperature)
    out_b.append(db)
    out_c.append(c)
  return np.stack(out_b), np.stack(out_c)


def soft_cd(x, bases, steps, temperature, beta):
  """Ham Alg. 3: K spherical K-means updates, then the ridge solve for the codes."""
  out_b, out_c = [], []
  for xb, db in zip(x, bases):
    x_unit = _unit_rows(xb, 1e-12)
    for _ in range(steps):
      c = _mass_normalised(softmax(x_unit @ db / temperature))
      db = _unit_columns(xb.T @ c, 1e-6)
    c = xb @ db @ np.linalg.inv(db.T @ db + beta * np.eye(db.shape[1]))
    out_b.append(db)
    out_c.append(c)
  return np.stack(out_b), np.stack(out_c)


# ----------------------------------------------------------------------------------------------
# A transcription of the official Hamburger (github.com/Gsunshine/Enjoy-Hamburger,
# seg/HamNet/hamburger/ham.py and burger.py: _MatrixDecomposition2DBase.forward, NMF2D, VQ2D,
# CD2D, HamburgerV1.forward) in jax.numpy, in its own layouts (x (B·S, D, N), images NCHW), so
# that its gradients can be compared too. `no_grad=True` is HamNet (`local_inference` and the
# loop under torch.no_grad(), VQ's ‖x‖ in compute_coef too); `no_grad=False` drops every no_grad
# (the mmseg LightHam head does so for NMF).


def _jnp():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jax, jnp


def official_decomposition(x, bases, ham, steps, inv_t=100.0, beta=0.1, no_grad=True):
  """x (B·S, D, N), bases (B·S, D, R) drawn by the caller -> (bases, coef (B·S, N, R), recon)."""
  jax, jnp = _jnp()
  sg = jax.lax.stop_gradient if no_grad else (lambda a: a)
  bmm, tr = jnp.matmul, lambda a: jnp.swapaxes(a, 1, 2)

  def normalize(a, eps=1e-12):  # F.normalize(a, dim=1, eps)
    return a / jnp.maximum(jnp.sqrt(jnp.sum(a * a, axis=1, keepdims=True)), eps)

  if ham == "nmf":
    inv_t = 1
  # local_inference
  xs, b = sg(x), sg(bases)
  coef = jax.nn.softmax(inv_t * bmm(tr(xs), b), axis=-1)
  for _ in range(steps):  # local_step
    if ham == "nmf":
      coef = coef * bmm(tr(xs), b) / (bmm(coef, bmm(tr(b), b)) + 1e-6)
      b = b * bmm(xs, coef) / (bmm(b, bmm(tr(coef), coef)) + 1e-6)
    else:
      std_b = normalize(b, 1e-6) if ham == "vq" else b
      coef = jax.nn.softmax(inv_t * bmm(tr(normalize(xs)), std_b), axis=-1)
      coef = coef / (1e-6 + jnp.sum(coef, axis=1, keepdims=True))
      b = bmm(xs, coef)
      if ham == "cd":
        b = normalize(b, 1e-6)
  b, coef = sg(b), sg(coef)
  # compute_coef
  if ham == "nmf":
    coef = coef * bmm(tr(x), b) / (bmm(coef, bmm(tr(b), b)) + 1e-6)
  elif ham == "vq":
    x_norm = sg(jnp.sqrt(jnp.sum(x * x, axis=1, keepdims=True)))
    coef = jax.nn.softmax(inv_t * bmm(tr(x / (1e-6 + x_norm)), normalize(b, 1e-6)), axis=-1)
  else:
    temp = jnp.linalg.inv(bmm(tr(b), b) + beta * jnp.eye(b.shape[-1]))
    coef = bmm(bmm(tr(x), b), temp)
  return b, coef, bmm(b, tr(coef))


def official_hamburger_v1(x, params, bases, ham, groups, steps, training, inv_t=100.0, beta=0.1,
                          no_grad=True, bn_eps=1e-5):
  """HamburgerV1.forward on x (B, C, H, W) with torch-layout weights.

  params: lower_w (D, C), lower_b (D,), upper_w (C, D) (1×1 kernels squeezed), bn_gamma,
  bn_beta, bn_mean, bn_var (C,); bases (B·S, D/S, R). Training: BN on the batch statistics
  (biased variance); evaluation: on the running ones.
  """
  jax, jnp = _jnp()
  y = jnp.einsum("dc,bchw->bdhw", params["lower_w"], x) + params["lower_b"][:, None, None]
  if ham == "nmf":
    y = jax.nn.relu(y)
  b, d, h, w = y.shape
  _, _, recon = official_decomposition(y.reshape(b * groups, d // groups, h * w), bases, ham,
                                       steps, inv_t, beta, no_grad)
  z = jnp.einsum("cd,bdhw->bchw", params["upper_w"], recon.reshape(b, d, h, w))
  if training:
    mean = jnp.mean(z, axis=(0, 2, 3))
    var = jnp.mean(jnp.square(z - mean[:, None, None]), axis=(0, 2, 3))
  else:
    mean, var = params["bn_mean"], params["bn_var"]
  z = (z - mean[:, None, None]) / jnp.sqrt(var[:, None, None] + bn_eps)
  z = z * params["bn_gamma"][:, None, None] + params["bn_beta"][:, None, None]
  return jax.nn.relu(z + x)
