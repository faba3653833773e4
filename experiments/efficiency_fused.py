"""The fastest regular (softmax) attention JAX has on the present accelerator, and when it applies.

GPU: cuDNN flash attention (rules of jax/_src/cudnn/fused_attention_stablehlo.py); TPU: the
Pallas flash kernel, lengths padded to its 128 blocks and masked; CPU: none.
`regular_attention(kernel)` is `ops.dot_product_attention`'s softmax form through the kernel,
the `attention_fn` a GlobalAttention (and a network, through its `attention_kwargs`) takes.
"""

import jax
import jax.numpy as jnp

from attention_lab.ops import attention as attention_ops

LABELS = {"cudnn": "Attn (cuDNN flash)", "pallas": "Attn (Pallas flash)"}
NONE_HERE = ("Fused regular attention (cuDNN flash on a GPU, Pallas flash on a TPU): none on "
             "this device")
_BLOCK = 128  # the Pallas kernel's block length


def kernel_for(platform: str | None = None) -> str | None:
  """'cudnn' on a GPU, 'pallas' on a TPU, None elsewhere (default: jax's default backend)."""
  return {"gpu": "cudnn", "cuda": "cudnn", "rocm": "cudnn", "tpu": "pallas"}.get(
      platform or jax.default_backend())


def kernel_of(config) -> str | None:
  """`config.fused_attention`: "auto" (the present GPU's or TPU's kernel; None on a CPU),
  "none", or a kernel name."""
  choice = config.get("fused_attention", "auto")
  if choice == "auto":
    return kernel_for()
  if choice not in ("none", "", None, *LABELS):
    raise ValueError(f"config.fused_attention = {choice!r}: must be auto|none|{'|'.join(LABELS)}")
  return choice if choice in LABELS else None


def unsupported_reason(kernel: str, q, k, v, *, bias=None, training: bool = False,
                       compute_capability: tuple[int, int] | None = None) -> str | None:
  """Why `kernel` cannot attend q (B, Nq, H, D), k, v (B, Nk, H, Dv): one line naming the first
  rule broken; None if it can. `compute_capability`: the present GPU's by default (limits are
  lower before Hopper)."""
  d, dv = q.shape[-1], v.shape[-1]
  if kernel == "pallas":
    rules = [(dv != d, f"value head dim {dv} ≠ {d}: the Pallas flash kernel needs them equal"),
             (d > _BLOCK and d % _BLOCK,
              f"head dim {d}: the Pallas flash kernel needs ≤ 128 or a multiple of 128")]
  elif kernel == "cudnn":
    cc = compute_capability
    if cc is None and jax.default_backend() == "gpu":
      cc = tuple(int(x) for x in jax.devices()[0].compute_capability.split("."))
    hopper, dtype = tuple(cc or ()) >= (9, 0), jnp.dtype(q.dtype)
    limit = 256 if hopper else 128
    rules = [
        (dtype not in (jnp.float16, jnp.bfloat16),
         f"{dtype.name}: cuDNN flash attention needs float16/bfloat16"),
        (d % 8 or d > limit, f"head dim {d}: cuDNN flash attention needs a multiple of 8, "
         f"≤ {limit}{' (Hopper)' if hopper else ' (≤ 256 from compute capability 9.0)'}"),
        (dv != d and not hopper,
         f"value head dim {dv} ≠ {d}: cuDNN needs compute capability ≥ 9.0 for that"),
        (bias is not None and training and (q.shape[1] % 2 or k.shape[1] % 2),
         f"sequence lengths {q.shape[1]}, {k.shape[1]}: cuDNN training with a bias needs even "
         "lengths")]
  else:
    raise ValueError(f"kernel must be one of {sorted(LABELS)}, got {kernel!r}")
  return next((why for broken, why in rules if broken), None)


def cudnn_attention(q, k, v, *, scale=None, bias=None):
  """cuDNN flash attention, (B, N, H, D) layout, the semantics of ops.dot_product_attention."""
  return jax.nn.dot_product_attention(q, k, v, bias=bias, scale=scale, implementation="cudnn")


def pallas_attention(q, k, v, *, scale=None, bias=None, kernel=None):
  """The Pallas TPU flash kernel (`kernel`: or its `mha_reference`, any backend) on (B, N, H, D)
  inputs, lengths padded to 128 and masked with segment ids; q is scaled here (the kernel adds
  the bias after its own scale)."""
  from jax.experimental.pallas.ops.tpu import flash_attention as fa  # pylint: disable=g-import-not-at-top
  kernel = kernel or fa.flash_attention
  nq, nk = q.shape[1], k.shape[1]
  pad = lambda n: -n % _BLOCK
  q = q * jnp.asarray(attention_ops.default_scale(q, scale), q.dtype)
  heads_first = lambda x, n: jnp.pad(jnp.swapaxes(x, 1, 2),
                                     ((0, 0), (0, 0), (0, pad(n)), (0, 0)))
  qt, kt, vt = heads_first(q, nq), heads_first(k, nk), heads_first(v, nk)
  segments = None
  if pad(nq) or pad(nk):
    ids = lambda n: jnp.broadcast_to(
        (jnp.arange(n + pad(n)) < n).astype(jnp.int32), (q.shape[0], n + pad(n)))
    segments = fa.SegmentIds(q=ids(nq), kv=ids(nk))
  if bias is not None:
    bias = jnp.broadcast_to(bias, (q.shape[0], q.shape[2], nq, nk))
    bias = jnp.pad(bias, ((0, 0), (0, 0), (0, pad(nq)), (0, pad(nk))))
  out = kernel(qt, kt, vt, bias, segments, sm_scale=1.0)
  return jnp.swapaxes(out[:, :, :nq], 1, 2)


KERNEL_FUNCTIONS = {"cudnn": cudnn_attention, "pallas": pallas_attention}


def fused_attention(kernel: str):
  """The attention function (q, k, v, *, scale, bias) of `kernel`."""
  return KERNEL_FUNCTIONS[kernel]


def regular_attention(kernel: str):
  """`ops.dot_product_attention`'s softmax form (q, k, v, *, scale, bias, query_chunk_size)
  through `kernel` (query chunks are moot: a flash kernel never forms the logits); a call the
  kernel's rules exclude raises NotImplementedError with the reason, when it is traced."""
  def attend(q, k, v, *, scale=None, bias=None, query_chunk_size=None):
    del query_chunk_size
    attention_ops.check_qkv(q, k, v)
    reason = unsupported_reason(kernel, q, k, v, bias=bias)
    if reason:
      raise NotImplementedError(reason)
    return fused_attention(kernel)(q, k, v, scale=attention_ops.default_scale(q, scale),
                                   bias=bias)

  return attend
