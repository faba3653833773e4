"""AA Table 9: memory of the attention maps per stage of AA-ResNet-50, per image.

Run through `python -m experiments.efficiency --config=configs/efficiency/aa_table9.py`.
The layers are built as AA-ResNet-50's (κ = 2υ = 0.2, Nh = 8, and, as in the AA
paper's experiments, at least 20 key dimensions per head: dk = 160).

Per stage: the paper's arithmetic Nh·(HW)² bfloat16 per attention layer
(600 KB at 14×14 with Nh = 8, 37.5 KB at 7×7; training stores every layer's
maps, 6 MB in all; inference only the largest, 600 KB), beside XLA's measured
temporaries of our `layers.AugmentedConv` at that stage's size (batch 1,
bfloat16 compute), in inference and in training (forward + backward), and
beside the same 3×3 convolution without attention: the difference is what the
attention branch costs. Our operator computes logits and softmax in float32
(DESIGN.md), so its maps take Nh·(HW)²·4 bytes.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from experiments import measure

KB = 1024


def _layer(stage, config, attention: bool):
  from attention_lab import layers  # pylint: disable=g-import-not-at-top
  cin, cout, side, downsample = stage["channels"], stage["channels"], stage["side"], stage[
      "downsample"]
  rngs = nnx.Rngs(0)
  if not attention:
    return nnx.Conv(cin, cout, (3, 3), use_bias=False, dtype=jnp.bfloat16, rngs=rngs)
  return layers.AugmentedConv(cin, cout, 3, kappa=config.kappa, upsilon=config.upsilon,
                              heads=config.heads,
                              min_key_dims_per_head=config.min_key_dims_per_head,
                              positional="relative",
                              downsample=downsample, spatial_shape=(side, side),
                              dtype=jnp.bfloat16, rngs=rngs)


def _programs(model, side, channels):
  """XLA accounting of the layer's inference and training programs, and its MAdd."""
  x = jax.ShapeDtypeStruct((1, side, side, channels), jnp.float32)
  infer, state = measure.inference_fn(model)
  _, infer_acct = measure.compile_fn(infer, state, x)
  train, params, rest = measure.training_fn(model)
  _, train_acct = measure.compile_fn(train, params, rest, x, x)
  return infer_acct, train_acct, measure.madd_of(infer, state, x)


def _operator_shapes(side, heads, dk, dv):
  """Abstract bfloat16 (q, k, v, rel_h, rel_w) of the relative attention at a stage."""
  q = jax.ShapeDtypeStruct((1, side, side, heads, dk // heads), jnp.bfloat16)
  v = jax.ShapeDtypeStruct((1, side, side, heads, dv // heads), jnp.bfloat16)
  rel = jax.ShapeDtypeStruct((2 * side - 1, dk // heads), jnp.bfloat16)
  return q, q, v, rel, rel


def _operator_programs(fwd, shapes):
  """XLA accounting of the attention op alone: inference (fwd) and training (gradients of
  the sum of its output w.r.t. q, k, v)."""
  grad = jax.grad(lambda *a: jnp.sum(fwd(*a).astype(jnp.float32)), argnums=(0, 1, 2))
  return measure.compile_fn(fwd, *shapes)[1], measure.compile_fn(grad, *shapes)[1]


def relative_attention_with_bias(attend, q, k, v, rel_h, rel_w):
  """`ops.relative_attention_2d` as regular attention `attend(q, k, v, *, scale, bias)` with
  the relative logits as a materialised (B, H, HW, HW) bias; flattened (B, HW, H, Dv) output."""
  from attention_lab import ops  # pylint: disable=g-import-not-at-top
  b, x, y, h, d = q.shape
  n = x * y
  scale = d ** -0.5
  logits_h, logits_w = ops.relative_logits_2d(q * jnp.asarray(scale, q.dtype), rel_h, rel_w)
  bias = (logits_h[..., :, None] + logits_w[..., None, :]).reshape(b, h, n, n)
  flat = lambda t: t.reshape(b, n, *t.shape[-2:])
  return attend(flat(q), flat(k), flat(v), scale=scale, bias=bias.astype(q.dtype))


def _fused_operator_programs(kernel, shapes):
  """XLA accounting, infer / train, of the same relative attention through the device's fused
  kernel (the relative logits as its bias, so (HW)² bias memory remains), or why not."""
  from experiments import efficiency_fused  # pylint: disable=g-import-not-at-top
  q, _, v, _, _ = shapes
  n = q.shape[1] * q.shape[2]
  flat = lambda t: jax.ShapeDtypeStruct((1, n, *t.shape[-2:]), t.dtype)
  bias = jax.ShapeDtypeStruct((1, q.shape[3], n, n), q.dtype)
  reason = efficiency_fused.unsupported_reason(kernel, flat(q), flat(q), flat(v), bias=bias,
                                               training=True)
  if reason:
    return {"reason": reason}
  attend = efficiency_fused.fused_attention(kernel)
  infer, train = _operator_programs(
      lambda *a: relative_attention_with_bias(attend, *a), shapes)
  return {"reason": None, "infer": infer, "train": train}


def run(config) -> dict:
  from attention_lab import ops  # pylint: disable=g-import-not-at-top
  from experiments import efficiency_fused  # pylint: disable=g-import-not-at-top
  kernel = efficiency_fused.kernel_of(config)
  rows = []
  for stage in config.stages:
    stage = dict(stage)
    aa = _layer(stage, config, True)
    conv = _layer(stage, config, False)
    aa_infer, aa_train, aa_madd = _programs(aa, stage["side"], stage["channels"])
    conv_infer, conv_train, conv_madd = _programs(conv, stage["side"], stage["channels"])
    hw = stage["attention_side"] ** 2
    shapes = _operator_shapes(stage["attention_side"], config.heads, aa.dk, aa.dv)
    op_infer, op_train = _operator_programs(ops.relative_attention_2d, shapes)
    row = dict(
        stage=stage["name"], layers=stage["layers"], side=stage["side"],
        attention_side=stage["attention_side"], heads=config.heads, dk=aa.dk, dv=aa.dv,
        maps_bf16_bytes=config.heads * hw * hw * 2, maps_f32_bytes=config.heads * hw * hw * 4,
        aa_params=measure.params_of(aa), conv_params=measure.params_of(conv),
        attention_params=measure.params_of(aa) - (measure.params_of(aa.conv) if aa.conv else 0),
        aa_madd=aa_madd, conv_madd=conv_madd, op_infer=op_infer, op_train=op_train,
        aa_infer=aa_infer, aa_train=aa_train, conv_infer=conv_infer, conv_train=conv_train,
        paper=dict(config.paper).get(stage["name"]))
    if kernel:
      row["fused"] = {"label": efficiency_fused.LABELS[kernel],
                      **_fused_operator_programs(kernel, shapes)}
    rows.append(row)
    print(row, flush=True)
  return {"rows": rows}


def markdown(config, result, machine_line: str) -> str:
  rows = result["rows"]
  lines = [
      f"# {config.title}", "",
      f"Measured on {machine_line}. Command: `python -m experiments.efficiency "
      f"--config=configs/efficiency/{config.table}.py`.", "",
      f"AA-ResNet-50 attention layers (κ = {config.kappa}, υ = {config.upsilon}, Nh = "
      f"{config.heads}, ≥ {config.min_key_dims_per_head} key dimensions per head, relative "
      "logits; stage 2 attends on a 3×3/2-pooled grid), batch 1, "
      "bfloat16 compute. 'maps' = Nh·(HW)² per layer by arithmetic (paper: bfloat16; ours keeps "
      "logits and softmax in float32, ×2). XLA temp = `memory_analysis().temp_size_in_bytes` "
      "of one AugmentedConv layer, inference forward and training forward + backward, and of "
      "the same 3×3 convolution without attention; 'attention Δ' = AA − conv.", "",
      "| stage | layers | grid → attention grid | dk / dv | paper memory / layer | maps bf16 "
      "(arithmetic) | maps f32 (ours) | XLA temp of the attention op alone, infer / train | "
      "XLA temp infer AA / conv / Δ | XLA temp train AA / conv / Δ | attention params / layer "
      "(paper) | AA layer MAdd / conv MAdd (paper FLOPS) |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    p = r["paper"] or ("", "", "")
    ai, ci, at, ct = r["aa_infer"], r["conv_infer"], r["aa_train"], r["conv_train"]
    lines.append(
        f"| {r['stage']} | {r['layers']} | {r['side']}² → {r['attention_side']}² | "
        f"{r['dk']} / {r['dv']} | {p[0]} | {r['maps_bf16_bytes'] / KB:.1f} KB | "
        f"{r['maps_f32_bytes'] / KB:.1f} KB | {r['op_infer']['temp_bytes'] / KB:.0f} / "
        f"{r['op_train']['temp_bytes'] / KB:.0f} KB | {ai['temp_bytes'] / KB:.0f} / "
        f"{ci['temp_bytes'] / KB:.0f} / {(ai['temp_bytes'] - ci['temp_bytes']) / KB:.0f} KB | "
        f"{at['temp_bytes'] / KB:.0f} / {ct['temp_bytes'] / KB:.0f} / "
        f"{(at['temp_bytes'] - ct['temp_bytes']) / KB:.0f} KB | "
        f"{r['attention_params'] / 1e3:.1f}k ({p[1]}) | {r['aa_madd'] / 1e6:.1f}M / "
        f"{r['conv_madd'] / 1e6:.1f}M ({p[2]}) |")
  train_maps = sum(r["layers"] * r["maps_bf16_bytes"] for r in rows)
  infer_maps = max(r["maps_bf16_bytes"] for r in rows)
  train_delta = sum(r["layers"] * (r["aa_train"]["temp_bytes"] - r["conv_train"]["temp_bytes"])
                    for r in rows)
  infer_delta = max(r["aa_infer"]["temp_bytes"] - r["conv_infer"]["temp_bytes"] for r in rows)
  train_op = sum(r["layers"] * r["op_train"]["temp_bytes"] for r in rows)
  infer_op = max(r["op_infer"]["temp_bytes"] for r in rows)
  lines += [
      "", "| total | maps bf16 (arithmetic) | paper | XLA temp of the attention op (sum over "
      "layers / max) | XLA attention Δ temp of the layer |", "|---|---|---|---|---|",
      f"| training (every layer's maps) | {train_maps / KB:.1f} KB = {train_maps / 2**20:.2f} "
      f"MiB | {config.paper_totals[0]} | {train_op / 2**20:.2f} MiB | "
      f"{train_delta / 2**20:.2f} MiB |",
      f"| inference (largest layer) | {infer_maps / KB:.1f} KB | {config.paper_totals[1]} | "
      f"{infer_op / KB:.0f} KB | {infer_delta / KB:.0f} KB |", "",
      "Training sums the per-layer forward + backward temporaries (an upper bound on what a "
      "network stores: it keeps each layer's softmax output for the backward pass, the rest is "
      "freed in turn). The layer's Δ against a full 3×3 convolution can be negative: the AA "
      "layer's convolution has only Fout − dv filters, and XLA:CPU's bfloat16 convolutions "
      "materialise float32 copies of their kernels, which dominate the small-grid layers."]
  fused = [r for r in rows if r.get("fused")]
  if not fused:
    lines += ["", "Fused regular attention (cuDNN flash on a GPU, Pallas flash on a TPU): none "
              "on this device."]
  else:
    label = fused[0]["fused"]["label"]
    lines += ["", f"The same relative attention through {label}, the relative logits passed as "
              "its bias (so their Nh·(HW)² remain), XLA temp of the op alone:", "",
              "| stage | infer / train |", "|---|---|"]
    for r in fused:
      f = r["fused"]
      lines.append(f"| {r['stage']} | " + (f"not run: {f['reason']}" if f["reason"] else
                   f"{f['infer']['temp_bytes'] / KB:.0f} / {f['train']['temp_bytes'] / KB:.0f} KB")
                   + " |")
  return "\n".join(lines) + "\n"
