import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention_lab import models, ops
from attention_lab.layers.self_attention import SelfAttention
from attention_lab.models.sagan import ATTENTIONS, GanHamburger  # registers the SAGAN models
from experiments import model_stats


def _create(name, **kw):
  # unsafe_rbg keys: the initialisers compile far faster than with threefry.
  return models.create(name, rngs=nnx.Rngs(jax.random.key(0, impl="unsafe_rbg")), **kw)


@pytest.mark.parametrize("resolution,g_attention,d_attention,num_classes,spectral_norm", [
    (64, "sa", "refined", 5, True), (128, "hamburger", "none", 0, False)])
def test_train_step_at_tiny_width(resolution, g_attention, d_attention, num_classes,
                                  spectral_norm):
  """Built, G(z) → D forward and backward in one compiled program, every gradient finite."""
  z = jax.random.normal(jax.random.key(0), (2, 128))
  labels = jnp.array([1, 4]) if num_classes else None
  kw = dict(num_classes=num_classes, resolution=resolution, width=1,
            spectral_norm=spectral_norm)

  def build_and_step(z, labels):
    g = _create("sagan_generator", attention=g_attention, **kw)
    d = _create("sagan_discriminator", attention=d_attention, **kw)
    for model in (g, d):  # γ = σ = 0 at init would keep the context path out of the output
      if isinstance(model.context, SelfAttention):
        model.context.gamma[...] = jnp.ones(())
      if isinstance(model.context, GanHamburger):
        model.context.sigma[...] = jnp.ones(())

    def loss(g, d):  # G's hinge loss
      images = g(z, labels)
      return -jnp.mean(d(images, labels)), images

    (value, images), grads = nnx.value_and_grad(loss, argnums=(0, 1), has_aux=True)(g, d)
    return value, images, grads

  value, images, grads = jax.jit(build_and_step)(z, labels)
  assert images.shape == (2, resolution, resolution, 3) and images.dtype == jnp.float32
  assert np.all(np.abs(images) <= 1) and np.isfinite(value)
  leaves = jax.tree.leaves(grads)
  assert leaves and all(np.all(np.isfinite(g)) for g in leaves)
  assert any(np.any(g != 0) for g in jax.tree.leaves(grads[0]))  # G receives D's signal
  for model_grads, attention in zip(grads, (g_attention, d_attention)):
    if attention in ("sa", "refined"):
      kernel_grad = model_grads["context"]["f"]["layer"]["kernel"][...]
      if kernel_grad.size > 1 or not spectral_norm:  # W/σ(W) of a 1×1 W is ±1: zero gradient
        assert np.all(kernel_grad != 0)


@pytest.mark.parametrize("resolution", [64, 128])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_shapes_for_every_attention_option(resolution, attention):
  """Abstract (traced, not compiled), class-conditional."""
  kw = dict(resolution=resolution, attention=attention, width=1, spectral_norm=False)
  g = model_stats.build_abstract("sagan_generator", 3, **kw)
  d = model_stats.build_abstract("sagan_discriminator", 3, **kw)
  labels = jax.ShapeDtypeStruct((2,), jnp.int32)
  z = jax.ShapeDtypeStruct((2, 128), jnp.float32)
  images = nnx.eval_shape(lambda g, z, y: g(z, y), g, z, labels)
  assert images.shape == (2, resolution, resolution, 3)
  logits = nnx.eval_shape(lambda d, x, y: d(x, y), d, images, labels)
  assert logits.shape == (2,) and logits.dtype == jnp.float32


# Full-size (width 64) counts, abstract only. The context module sits at 32×32: in G after the
# block with 4w = 256 channels; in D after the block with 2w = 128 (128²) or w = 64 (64²).
@pytest.mark.parametrize("name,resolution,channels", [
    ("sagan_generator", 128, 256), ("sagan_generator", 64, 256),
    ("sagan_discriminator", 128, 128), ("sagan_discriminator", 64, 64)])
def test_context_module_sits_at_32x32(name, resolution, channels):
  build = lambda attention: model_stats.build_abstract(name, 0, resolution=resolution,
                                                       attention=attention, spectral_norm=False)
  shape = (128,) if name == "sagan_generator" else (resolution, resolution, 3)
  none, sa, refined = (build(a) for a in ("none", "sa", "refined"))
  c, n = channels, 32 * 32
  # f, g: C×C/8, h: C×C (no biases), γ. (Spectral norm off: its power iterations are dots too.)
  assert model_stats.count_params(sa)[0] - model_stats.count_params(none)[0] == (
      2 * c * c // 8 + c * c + 1)
  base = model_stats.forward_madd(none, shape)
  maps = n * (2 * c * c // 8 + c * c)
  assert model_stats.forward_madd(sa, shape) - base == maps + n * n * (c // 8 + c)
  assert model_stats.forward_madd(refined, shape) - base == maps + 2 * n * (c // 8) * c


def _conv(k, cin, cout):
  return k * k * cin * cout + cout


def test_parameter_counts_at_full_size():
  """SAGAN 128×128, width 64, SA at 32²: every parameter, counted by hand."""
  up = lambda i, o: _conv(3, i, o) + _conv(3, o, o) + _conv(1, i, o) + 2 * i + 2 * o  # + BNs
  g_expected = (128 * 16384 + 16384 + sum(up(i, o) for i, o in (
      (1024, 1024), (1024, 512), (512, 256), (256, 128), (128, 64)))
                + 2 * 64 + _conv(3, 64, 3) + (2 * 256 * 32 + 256 * 256 + 1))
  down = lambda i, o: _conv(3, i, o) + _conv(3, o, o) + _conv(1, i, o)
  d_expected = (down(3, 64) + sum(down(i, o) for i, o in (
      (64, 128), (128, 256), (256, 512), (512, 1024))) + 2 * _conv(3, 1024, 1024)
                + (2 * 128 * 16 + 128 * 128 + 1) + 1024 + 1)
  g = model_stats.build_abstract("sagan_generator", 0, resolution=128)
  d = model_stats.build_abstract("sagan_discriminator", 0, resolution=128)
  assert model_stats.count_params(g)[0] == g_expected == 32_232_708
  assert model_stats.count_params(d)[0] == d_expected == 38_439_618
  # Conditional: per-class BN scales and offsets in G, a 1024-wide class embedding in D.
  g1k = model_stats.build_abstract("sagan_generator", 1000, resolution=128)
  d1k = model_stats.build_abstract("sagan_discriminator", 1000, resolution=128)
  bn = sum(2 * c for c in (1024, 1024, 1024, 512, 512, 256, 256, 128, 128, 64))
  assert model_stats.count_params(g1k)[0] - model_stats.count_params(g)[0] == 999 * bn
  assert model_stats.count_params(d1k)[0] - model_stats.count_params(d)[0] == 1000 * 1024


def test_bad_arguments():
  with pytest.raises(ValueError, match="attention must be one of"):
    model_stats.build_abstract("sagan_generator", 0, attention="ham")
  with pytest.raises(ValueError, match=r"resolution must be one of \(32, 64, 128\)"):
    model_stats.build_abstract("sagan_discriminator", 0, resolution=16)
  with pytest.raises(ValueError, match=r"context_side must be one of \(8, 16\)"):
    model_stats.build_abstract("sagan_generator", 0, resolution=32, context_side=32)
  g = model_stats.build_abstract("sagan_generator", 3, resolution=64, width=1)
  d = model_stats.build_abstract("sagan_discriminator", 0, resolution=64, width=1)
  with pytest.raises(ValueError, match="labels must be class ids of shape"):
    g(jnp.ones((2, 128)))
  with pytest.raises(ValueError, match="labels must be None for an unconditional model"):
    d(jnp.ones((2, 64, 64, 3)), jnp.zeros((2,), jnp.int32))
  with pytest.raises(ValueError, match=r"z must have shape \(batch, 128\)"):
    g(jnp.ones((2, 64)), jnp.zeros((2,), jnp.int32))
  with pytest.raises(ValueError, match=r"x must have shape \(batch, 64, 64, 3\)"):
    d(jnp.ones((2, 32, 32, 3)))


def test_shared_class_embedding_conditions_like_biggan():
  """class_embedding = E: scale 1 + W_g·e(y), offset W_b·e(y) per norm, W zero at init (so G
  starts class-blind, like the per-class table), one (classes, E) embedding."""
  kw = dict(num_classes=3, resolution=32, width=1, latent_dim=8, spectral_norm=False)
  g = _create("sagan_generator", class_embedding=5, **kw)
  table = _create("sagan_generator", **kw)
  z = jax.random.normal(jax.random.key(1), (3, 8))
  labels = jnp.arange(3)
  np.testing.assert_allclose(g(jnp.repeat(z[:1], 3, 0), labels)[0],
                             g(jnp.repeat(z[:1], 3, 0), labels)[2], atol=1e-6)
  norms = [b.norm1 for b in g.blocks] + [b.norm2 for b in g.blocks]
  features = sum(n.norm.num_features for n in norms)
  params = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))  # noqa: E731
  assert params(g) - params(table) == 3 * 5 + 2 * 5 * features - 2 * 3 * features
  # A norm's scale and offset for class y are exactly 1 + W_g e_y and W_b e_y.
  norm, e = norms[0], g.class_embed.embedding[...]
  norm.gain.kernel[...] = jax.random.normal(jax.random.key(2), norm.gain.kernel.shape)
  norm.offset.kernel[...] = jax.random.normal(jax.random.key(3), norm.offset.kernel.shape)
  x = jax.random.normal(jax.random.key(4), (3, 4, 4, norm.norm.num_features))
  normalised = norm.norm(x)
  expected = (normalised * (1 + e @ norm.gain.kernel[...])[:, None, None]
              + (e @ norm.offset.kernel[...])[:, None, None])
  np.testing.assert_allclose(norm(x, e[labels]), expected, rtol=1e-5, atol=1e-5)
  out = g(jnp.repeat(z[:1], 3, 0), labels)
  assert not np.allclose(out[0], out[2], atol=1e-4)  # now the class matters
  grads = nnx.grad(lambda m: jnp.sum(m(z, labels) ** 2))(g)
  assert np.any(grads["class_embed"]["embedding"][...] != 0)
  with pytest.raises(ValueError, match="class_embedding must be >= 0"):
    _create("sagan_generator", class_embedding=-1, **kw)


def test_gan_hamburger_follows_hamgan():
  """σ = 0: the identity; σ = 1: x + W_u·NMF(ReLU(W_l x)) with the one-step NMF of ops; the
  bases are fixed in evaluation; no batch norm in either network (a BN in D lets it tell
  [real; fake] from fakes alone by batch statistics)."""
  ham = GanHamburger(8, dim=6, rank=2, steps=3, spectral_norm=False, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (2, 3, 5, 8))
  np.testing.assert_array_equal(ham(x), x)
  ham.sigma[...] = jnp.ones(())
  ham.eval()
  tokens = jax.nn.relu(x.reshape(2, 15, 8) @ ham.lower.kernel[...])
  bases, codes = ops.nmf(tokens, ops.random_bases(jax.random.key(0), 2, 6, 2), steps=3)
  expected = x + (jnp.einsum("bnr,bdr->bnd", codes, bases) @ ham.upper.kernel[...]).reshape(
      x.shape)
  np.testing.assert_allclose(ham(x), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(ham(x), ham(x))
  for name in ("sagan_generator", "sagan_discriminator"):
    model = model_stats.build_abstract(name, 0, resolution=32, attention="hamburger", width=2)
    norms = [m for _, m in nnx.iter_graph(model.context) if isinstance(m, nnx.BatchNorm)]
    assert isinstance(model.context, GanHamburger) and not norms
  d = model_stats.build_abstract("sagan_discriminator", 0, resolution=32, attention="hamburger",
                                 width=2)
  assert not [m for _, m in nnx.iter_graph(d) if isinstance(m, nnx.BatchNorm)]
