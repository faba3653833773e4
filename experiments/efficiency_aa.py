"""AA Table 9: memory of the attention maps per stage of AA-ResNet-50 (per image): the paper's
arithmetic Nh·(HW)² beside XLA's temporaries of our AugmentedConv (bfloat16) with and without
the attention branch, and of the relative attention op alone."""

import jax
import jax.numpy as jnp
from flax import nnx

from attention_lab import layers, ops
from experiments import efficiency_fused as fused_lib
from experiments import measure, plots

KB, MIB = 1024, 2**20


def _operator_programs(fwd, shapes):
  """XLA accounting of an attention op: inference and gradients of its sum w.r.t. q, k, v."""
  grad = jax.grad(lambda *a: jnp.sum(fwd(*a).astype(jnp.float32)), argnums=(0, 1, 2))
  return measure.compile_fn(fwd, *shapes)[1], measure.compile_fn(grad, *shapes)[1]


def relative_attention_with_bias(attend, q, k, v, rel_h, rel_w):
  """`ops.relative_attention_2d` as regular attention `attend(q, k, v, *, scale, bias)`, the
  relative logits a materialised (B, H, HW, HW) bias; flattened (B, HW, H, Dv) output."""
  b, x, y, h, d = q.shape
  scale = d ** -0.5
  logits_h, logits_w = ops.relative_logits_2d(q * jnp.asarray(scale, q.dtype), rel_h, rel_w)
  bias = (logits_h[..., :, None] + logits_w[..., None, :]).reshape(b, h, x * y, x * y)
  flat = lambda t: t.reshape(b, x * y, *t.shape[-2:])
  return attend(flat(q), flat(k), flat(v), scale=scale, bias=bias.astype(q.dtype))


def _fused_operator_programs(kernel, shapes):
  """The relative attention through the device's fused kernel (its logits as the bias), or why
  not."""
  q, _, v, _, _ = shapes
  n = q.shape[1] * q.shape[2]
  flat = lambda t: jax.ShapeDtypeStruct((1, n, *t.shape[-2:]), t.dtype)
  bias = jax.ShapeDtypeStruct((1, q.shape[3], n, n), q.dtype)
  reason = fused_lib.unsupported_reason(kernel, flat(q), flat(q), flat(v), bias=bias,
                                        training=True)
  if reason:
    return {"reason": reason}
  attend = fused_lib.fused_attention(kernel)
  infer, train = _operator_programs(lambda *a: relative_attention_with_bias(attend, *a), shapes)
  return {"reason": None, "infer": infer, "train": train}


def run(config) -> dict:
  kernel, rows = fused_lib.kernel_of(config), []
  for stage in map(dict, config.stages):
    side, channels, att = stage["side"], stage["channels"], stage["attention_side"]
    aa = layers.AugmentedConv(
        channels, channels, 3, kappa=config.kappa, upsilon=config.upsilon, heads=config.heads,
        min_key_dims_per_head=config.min_key_dims_per_head, positional="relative",
        downsample=stage["downsample"], spatial_shape=(side, side), dtype=jnp.bfloat16,
        rngs=nnx.Rngs(0))
    conv = nnx.Conv(channels, channels, (3, 3), use_bias=False, dtype=jnp.bfloat16,
                    rngs=nnx.Rngs(0))
    maps = config.heads * att**4
    row = dict(
        stage=stage["name"], layers=stage["layers"], side=side, attention_side=att,
        heads=config.heads, dk=aa.dk, dv=aa.dv, maps_bf16_bytes=2 * maps,
        maps_f32_bytes=4 * maps, aa_params=measure.params_of(aa),
        conv_params=measure.params_of(conv),
        attention_params=measure.params_of(aa) - (measure.params_of(aa.conv) if aa.conv else 0),
        paper=dict(config.paper).get(stage["name"]))
    x = jax.ShapeDtypeStruct((1, side, side, channels), jnp.float32)
    for name, layer in (("aa", aa), ("conv", conv)):
      infer, row[f"{name}_infer"], _, args = measure.layer_program(layer, "infer", x)
      row[f"{name}_train"] = measure.layer_program(layer, "train", x)[1]
      row[f"{name}_madd"] = measure.madd_of(infer, *args)
    bf16 = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)
    q = bf16(1, att, att, config.heads, aa.dk // config.heads)
    rel = bf16(2 * att - 1, aa.dk // config.heads)
    shapes = (q, q, bf16(1, att, att, config.heads, aa.dv // config.heads), rel, rel)
    row["op_infer"], row["op_train"] = _operator_programs(ops.relative_attention_2d, shapes)
    if kernel:
      row["fused"] = {"label": fused_lib.LABELS[kernel], **_fused_operator_programs(kernel, shapes)}
    rows.append(row)
    print(row, flush=True)
  return {"rows": rows}


def markdown(config, result, machine: str) -> str:
  rows = result["rows"]
  kb = lambda b: f"{b / KB:.0f}"
  temps = lambda a, c: lambda r: (f"{kb(r[a]['temp_bytes'])} / {kb(r[c]['temp_bytes'])} / "
                                  f"{kb(r[a]['temp_bytes'] - r[c]['temp_bytes'])} KB")
  paper = lambda i: lambda r: (r["paper"] or ("", "", ""))[i]
  lines = measure.header(config, machine, config.about) + measure.md_table({
      "stage": lambda r: r["stage"], "layers": lambda r: str(r["layers"]),
      "grid → attention grid": lambda r: f"{r['side']}² → {r['attention_side']}²",
      "dk / dv": lambda r: f"{r['dk']} / {r['dv']}", "paper memory / layer": paper(0),
      "maps bf16 (arithmetic)": lambda r: f"{r['maps_bf16_bytes'] / KB:.1f} KB",
      "maps f32 (ours)": lambda r: f"{r['maps_f32_bytes'] / KB:.1f} KB",
      "XLA temp of the attention op alone, infer / train": lambda r: (
          f"{kb(r['op_infer']['temp_bytes'])} / {kb(r['op_train']['temp_bytes'])} KB"),
      "XLA temp infer AA / conv / Δ": temps("aa_infer", "conv_infer"),
      "XLA temp train AA / conv / Δ": temps("aa_train", "conv_train"),
      "attention params / layer (paper)": lambda r: (
          f"{r['attention_params'] / 1e3:.1f}k ({paper(1)(r)})"),
      "AA layer MAdd / conv MAdd (paper FLOPS)": lambda r: (
          f"{r['aa_madd'] / 1e6:.1f}M / {r['conv_madd'] / 1e6:.1f}M ({paper(2)(r)})")}, rows)
  total = lambda f: sum(r["layers"] * f(r) for r in rows)
  delta = lambda p: lambda r: r[f"aa_{p}"]["temp_bytes"] - r[f"conv_{p}"]["temp_bytes"]
  lines += [
      "", "| total | maps bf16 (arithmetic) | paper | XLA temp of the attention op (sum over "
      "layers / max) | XLA attention Δ temp of the layer |", "|---|---|---|---|---|",
      f"| training (every layer's maps) | {total(lambda r: r['maps_bf16_bytes']) / KB:.1f} KB = "
      f"{total(lambda r: r['maps_bf16_bytes']) / MIB:.2f} MiB | {config.paper_totals[0]} | "
      f"{total(lambda r: r['op_train']['temp_bytes']) / MIB:.2f} MiB | "
      f"{total(delta('train')) / MIB:.2f} MiB |",
      f"| inference (largest layer) | {max(r['maps_bf16_bytes'] for r in rows) / KB:.1f} KB | "
      f"{config.paper_totals[1]} | {kb(max(r['op_infer']['temp_bytes'] for r in rows))} KB | "
      f"{kb(max(map(delta('infer'), rows)))} KB |", "",
      "Training sums the per-layer forward + backward temporaries (an upper bound: a network "
      "keeps each layer's softmax output for the backward pass, the rest is freed in turn). The "
      "layer's Δ against a full 3×3 convolution can be negative: the AA layer's convolution has "
      "only Fout − dv filters, and XLA:CPU's bfloat16 convolutions materialise float32 copies of "
      "their kernels, which dominate the small-grid layers."]
  fused = [r for r in rows if r.get("fused")]
  if not fused:
    return "\n".join(lines + ["", f"{fused_lib.NONE_HERE}."]) + "\n"
  lines += ["", f"The same relative attention through {fused[0]['fused']['label']}, the relative "
            "logits passed as its bias (their Nh·(HW)² remain), XLA temp of the op alone:", ""]
  lines += measure.md_table({"stage": lambda r: r["stage"], "infer / train": lambda r: (
      f"not run: {r['fused']['reason']}" if r["fused"]["reason"] else
      f"{kb(r['fused']['infer']['temp_bytes'])} / {kb(r['fused']['train']['temp_bytes'])} KB")},
      fused)
  return "\n".join(lines) + "\n"


def plot(config, result, path, machine: str) -> str:
  """Attention-map memory per layer: the paper's arithmetic, ours and XLA's temporaries."""
  del config, machine
  rows = result["rows"]
  plots.grouped_bars(path, "AA Table 9: attention-map memory per layer", [r["stage"] for r in rows],
                     [("KB per layer (log)", {
                         "paper: Nh·(HW)² bf16": [r["maps_bf16_bytes"] / 1024 for r in rows],
                         "ours: Nh·(HW)² f32": [r["maps_f32_bytes"] / 1024 for r in rows],
                         "XLA temp, op inference": [r["op_infer"]["temp_bytes"] / 1024
                                                    for r in rows],
                         "XLA temp, op training": [r["op_train"]["temp_bytes"] / 1024
                                                   for r in rows]})], log=True)
  return plots.link("Plot (per layer, log scale)", path)
