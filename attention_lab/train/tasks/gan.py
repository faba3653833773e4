"""GAN training (SAGAN recipe) and generate-then-score evaluation (FID, IS, KID).

Models: the registry's `sagan_generator` / `sagan_discriminator` (models/sagan.py;
spectral norm in both, conditional BN and the projection discriminator when
`config.conditional`), the context module `config.model.attention` (none | sa |
refined | hamburger | conv; `config.model.d_attention` may differ in D).

Training (SAGAN Sec. 4-5): hinge loss, D: E[relu(1 − D(x, y))] + E[relu(1 + D(G(z, ỹ), ỹ))],
G: −E[D(G(z, ỹ), ỹ)], z ~ N(0, I), fake labels ỹ uniform over the classes; G and D
each with its own optimizer (config.g_optimizer / config.d_optimizer; SAGAN's TTUR:
Adam β = (0, 0.9), 1e-4 for G, 4e-4 for D). `config.mode_seeking` = λ > 0 adds MSGAN's
mode-seeking term λ·L_ms to G's loss (`mode_seeking_loss`; G's batch then holds pairs of
one class: its second half's labels are its first half's), against a G that ignores z.
One `train_step` runs `config.d_steps` D updates then one G update, all in one jitted
program (the D updates unrolled: XLA:CPU runs a D update many times slower as a `lax.scan`
body; experiments/results/default_gan.md). Each D update sees its own real images: the
batch carries (B, d_steps, H, W, 3) images (data/gan.py), i.e. d_steps·B real images per
step.
D sees [real; fake] as one concatenated batch (one spectral-norm power iteration
per update, as BigGAN). In a D update G runs in training mode (batch statistics)
on fresh noise and its new BatchNorm running averages are discarded; only the G
update moves them. D runs in training mode in both updates (its spectral-norm
vectors advance in each, as PyTorch's `spectral_norm` does).

EMA: state["ema"] = decay·ema + (1 − decay)·θ_G after every step
(`optax.incremental_update`), from `config.ema_start_step` on (θ_G copied before).
`config.ema_decay = 0` (the papers' setting) makes it equal to G's weights. Evaluation
always uses G(ema weights, G's BatchNorm running averages) in evaluation mode.

State: {"step", "generator": {"params", "non_params", "opt_state"}, "discriminator": {...},
"ema": G's params, "rng": PRNG key}; the loop shards and checkpoints all of it, so a
resumed run continues exactly (both models, both optimizer states, EMA, RNG, data).

Evaluation (`config.eval`; the generic parts in evaluation/generative.py):
`num_samples` images from a fixed key (class-balanced labels when conditional;
50,000 for paper numbers) → features of
- "inception": pytorch-fid's FID InceptionV3 (evaluation/inception.py) from the
  weights file `eval.inception_path` (pt_inception-2015-12-05-6726825d.pth);
- "digits": the penultimate features and logits of a digits classifier trained
  by this library: the default classification experiment (`eval.classifier_config`,
  configs/default.py) in `eval.classifier_workdir`; trained there first when that
  workdir holds no finished run (about a minute on a CPU; train/dependencies.py);
- "none": no scores (sample grids only);
then FID (lower is better: the headline), Inception Score, KID, k-NN precision
and recall (k = 3; equally many generated and real features), and when
conditional the per-class recall and `eval_class_diversity` (mean pairwise pixel
distance within a class over the real images' of that class, averaged over
classes); with the digits classifier the conditional accuracy: the share of
class-k samples the classifier labels k. The real side (`eval.real_split`, at most
`eval.num_real` images; `eval.num_kid_real` features kept for KID and
precision/recall) is computed once and cached as an .npz in `eval.stats_dir`
(default: <TFDS data_dir>/gan_statistics), keyed by dataset, split, size, count
and feature extractor. Each evaluation appends its scores to
<workdir>/fid_history.json and redraws <workdir>/fid_history.png.
Cost per evaluation: num_samples G forwards plus feature extraction; the FID's
matrix square root is O(d³) (d = 2048 for Inception); precision/recall
O(n²·d) for n = min(num_samples, num_kid_real).
"""

import hashlib
import math
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from clu import metrics
from etils import epath
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import attention_lab.models.sagan  # noqa: F401  (registers the SAGAN models)
from attention_lab import models
from attention_lab.data import gan as gan_data
from attention_lab.data import pipeline
from attention_lab.data.info import data_info
from attention_lab.evaluation import generative, submission
from attention_lab.train import optim, workdir
from attention_lab.train.tasks import base

FEATURES = ("inception", "digits", "none")


@flax.struct.dataclass
class GanMetrics(metrics.Collection):
  d_loss: metrics.Average.from_output("d_loss")
  g_loss: metrics.Average.from_output("g_loss")
  d_real: metrics.Average.from_output("d_real")
  d_fake: metrics.Average.from_output("d_fake")


def hinge_d_loss(real_logits, fake_logits):
  return jnp.mean(jax.nn.relu(1 - real_logits)) + jnp.mean(jax.nn.relu(1 + fake_logits))


def mode_seeking_loss(images, z):
  """MSGAN's mode-seeking term (Mao et al. 2019, Eq. 3, in the form their code minimises):
  for pairs (first half, second half of the batch, the same class),
  1 / (mean |G(z₁) − G(z₂)| / mean |z₁ − z₂| + ε), ε = 1e-5, averaged over pairs; G
  minimises it, so its images must move with z."""
  h = images.shape[0] // 2
  image_gap = jnp.mean(jnp.abs(images[:h] - images[h:2 * h]), axis=(1, 2, 3))
  z_gap = jnp.mean(jnp.abs(z[:h] - z[h:2 * h]), axis=1)
  return jnp.mean(1.0 / (image_gap / z_gap + 1e-5))


class GAN(base.Task):
  """SAGAN-style conditional or unconditional GAN; evaluation by FID (lower is better)."""

  headline = "fid"  # lower is better

  def __init__(self, config, env):
    super().__init__(config, env)
    gan_data.check(config)
    classes = data_info(config).num_classes
    self.conditional = bool(config.conditional)
    if self.conditional and classes < 2:
      raise ValueError(f"conditional=True needs a labelled dataset; {config.dataset.name!r} has "
                       f"{classes} classes")
    self.num_classes = classes if self.conditional else 0
    if config.microbatches != 1:
      raise ValueError(f"microbatches = {config.microbatches}: the GAN's D and G steps take "
                       "the whole batch (the papers' GAN batches fit one device); use 1")
    self.d_steps = int(config.d_steps)
    if self.d_steps < 1:
      raise ValueError(f"d_steps must be >= 1, got {config.d_steps}")
    if not 0.0 <= config.ema_decay < 1.0:
      raise ValueError(f"ema_decay must be in [0, 1), got {config.ema_decay}")
    self.mode_seeking = float(config.mode_seeking)
    if self.mode_seeking < 0 or (self.mode_seeking and config.batch_size % 2):
      raise ValueError(f"mode_seeking must be >= 0 (with an even batch_size), got "
                       f"{config.mode_seeking} (batch_size {config.batch_size})")
    if config.eval.features not in FEATURES:
      raise ValueError(f"eval.features must be one of {FEATURES}, got {config.eval.features!r}")
    self.total_steps = int(config.num_train_steps)
    if self.total_steps < 1:
      raise ValueError(f"num_train_steps must be >= 1, got {config.num_train_steps}")
    self.latent_dim = config.model.latent_dim
    self.g_schedule = optim.make_schedule(config.g_optimizer, steps_per_epoch=1,
                                          total_steps=self.total_steps)
    self.d_schedule = optim.make_schedule(config.d_optimizer, steps_per_epoch=1,
                                          total_steps=self.total_steps)
    self.generator = base.TrainableModel(
        lambda rngs: self._build("generator", rngs),
        optim.make_optimizer(config.g_optimizer, self.g_schedule), config.seed)
    self.discriminator = base.TrainableModel(
        lambda rngs: self._build("discriminator", rngs),
        optim.make_optimizer(config.d_optimizer, self.d_schedule), config.seed + 1)
    self._generate = None
    self._extractor = None
    self._real = None

  # ---------------------------------------------------------------- models
  def _build(self, which, rngs):
    m = self.config.model
    kw = dict(num_classes=self.num_classes, resolution=self.config.dataset.image_size,
              width=m.width, spectral_norm=m.spectral_norm, dtype=base.model_dtype(m.dtype),
              context_side=m.context_side or None, key_pool=m.key_pool,
              rngs=rngs)
    if which == "generator":
      return models.create("sagan_generator", attention=m.attention, latent_dim=m.latent_dim,
                           class_embedding=m.class_embedding,
                           hierarchical_z=m.hierarchical_z, **kw)
    return models.create("sagan_discriminator", attention=m.d_attention or m.attention,
                         minibatch_std=m.minibatch_std, **kw)

  def init_state(self):
    g = self.generator.init()
    return {"step": jnp.zeros((), jnp.int32), "generator": g,
            "discriminator": self.discriminator.init(),
            "ema": jax.tree.map(jnp.copy, g["params"]),
            "rng": jax.random.key(self.config.seed + 2)}

  def _latent(self, key, n):
    kz, ky = jax.random.split(key)
    z = jax.random.normal(kz, (n, self.latent_dim), jnp.float32)
    if not self.conditional:
      return z, None
    return z, jax.random.randint(ky, (n,), 0, self.num_classes)

  def _split_over_data(self, *arrays):
    """Latents drawn inside the step are split like the batch: else every device runs all of G."""
    return [None if a is None else jax.lax.with_sharding_constraint(a, self.env.data_sharding)
            for a in arrays]

  # ---------------------------------------------------------------- training
  def train_step(self, state, batch):
    images, labels = batch["image"], batch["label"]
    if images.ndim != 5 or images.shape[1] != self.d_steps:
      raise ValueError(f"batch['image'] must be (B, d_steps={self.d_steps}, H, W, 3), got "
                       f"{images.shape}")
    b = images.shape[0]
    rng, key = jax.random.split(state["rng"])
    keys = jax.random.split(key, self.d_steps + 1)
    g_state = state["generator"]

    def d_update(d_state, xs):
      real, real_y, k = xs
      z, y = self._split_over_data(*self._latent(k, b))
      fake = jax.lax.stop_gradient(self.generator.model(g_state, train=True)(z, y))

      def loss_fn(params):
        disc = self.discriminator.model({**d_state, "params": params}, train=True)
        both = jnp.concatenate([real.astype(fake.dtype), fake])
        both_y = None if y is None else jnp.concatenate([real_y, y])
        logits = disc(both, both_y)
        loss = hinge_d_loss(logits[:b], logits[b:])
        return loss, (base.non_params(disc), (loss, logits[:b].mean(), logits[b:].mean()))

      grads, (non_params, values) = jax.grad(loss_fn, has_aux=True)(d_state["params"])
      return self.discriminator.update(d_state, grads, non_params), values

    d_state, values = state["discriminator"], []
    for i in range(self.d_steps):  # unrolled, not a lax.scan (the module docstring says why)
      d_state, v = d_update(d_state, (images[:, i], labels[:, i], keys[i]))
      values.append(v)
    d_loss, d_real, d_fake = (jnp.stack(v) for v in zip(*values))

    z, y = self._latent(keys[-1], b)
    if self.mode_seeking and y is not None:  # pairs of one class: y's second half = first's
      y = jnp.concatenate([y[:b // 2]] * 2)
    z, y = self._split_over_data(z, y)

    def g_loss_fn(params):
      gen = self.generator.model({**g_state, "params": params}, train=True)
      disc = self.discriminator.model(d_state, train=True)
      fake = gen(z, y)
      loss = -jnp.mean(disc(fake, y))
      total = loss + self.mode_seeking * mode_seeking_loss(fake, z) if self.mode_seeking else loss
      return total, (base.non_params(gen), base.non_params(disc), loss)

    grads, (g_non_params, d_non_params, g_loss) = jax.grad(g_loss_fn, has_aux=True)(
        g_state["params"])
    g_state = self.generator.update(g_state, grads, g_non_params)
    step = state["step"] + 1
    decay = jnp.where(step > self.config.ema_start_step, self.config.ema_decay, 0.0)
    values = GanMetrics.single_from_model_output(
        d_loss=d_loss.mean(), g_loss=g_loss, d_real=d_real.mean(), d_fake=d_fake.mean())
    return {"step": step, "generator": g_state,
            "discriminator": {**d_state, "non_params": d_non_params},
            "ema": optax.incremental_update(g_state["params"], state["ema"], 1 - decay),
            "rng": rng}, values

  def train_batches(self, start_step):
    return gan_data.train_iterator(self.config, local_batch_size=self.env.local_batch_size,
                                   d_steps=self.d_steps, start_step=start_step)

  def batch_spec(self):
    b, d, s = self.config.batch_size, self.d_steps, self.config.dataset.image_size
    return {"image": jax.ShapeDtypeStruct((b, d, s, s, 3), jnp.float32),
            "label": jax.ShapeDtypeStruct((b, d), jnp.int32)}

  def learning_rates(self, step):
    return {"g_learning_rate": float(self.g_schedule(step - 1)),
            "d_learning_rate": float(self.d_schedule(step - 1))}

  # ---------------------------------------------------------------- sampling
  def generate(self, state, key, labels, n: int) -> np.ndarray:
    """n images (n, S, S, 3) in [−1, 1] from G with the EMA weights, evaluation mode."""
    if self._generate is None:
      def gen(g_state, ema, key, labels):
        model = nnx.merge(self.generator.eval_graphdef, ema, g_state["non_params"], copy=True)
        z = jax.random.normal(key, (labels.shape[0], self.latent_dim), jnp.float32)
        return model(z, labels if self.conditional else None)

      self._generate = jax.jit(gen, out_shardings=NamedSharding(self.env.mesh, P()))
    labels = jnp.asarray(np.resize(np.asarray(labels, np.int32), n))
    return np.asarray(self._generate(state["generator"], state["ema"], key, labels))

  def samples(self, state, n: int, *, seed_offset: int = 0):
    """(uint8 images (n, S, S, 3), labels (n,)) from the fixed evaluation key, in chunks of
    `eval.batch_size`."""
    labels = generative.balanced_labels(n, self.num_classes)
    key = jax.random.key(self.config.eval.seed + seed_offset)
    images = generative.sample(lambda k, y: self.generate(state, k, y, len(y)), key, labels,
                               self.config.eval.batch_size)
    return images, labels

  def image_summaries(self, state):
    """A fixed-noise grid: one image per class (first `eval.grid_classes`), each a column of
    `eval.grid_rows` samples (unconditional: grid_classes columns)."""
    rows, cols = self.config.eval.grid_rows, self.config.eval.grid_classes
    if self.conditional:
      cols = min(cols, self.num_classes)
    labels = np.tile(np.arange(cols), rows)
    images = generative.to_uint8(self.generate(state, jax.random.key(self.config.eval.seed + 1),
                                               labels, rows * cols))
    return {"samples": generative.grid(images, rows, cols)}

  # ---------------------------------------------------------------- evaluation
  def feature_extractor(self):
    """(key, fn): fn maps uint8 images (n, S, S, 3) → (features (n, d), logits (n, k))."""
    if self._extractor is None:
      ev = self.config.eval
      if ev.features == "inception":
        self._extractor = generative.inception_extractor(ev.inception_path)
      else:
        if "classifier" not in self.env.dependencies:
          raise ValueError("eval.features = 'digits' needs the digits classifier of "
                           "eval.classifier_config, resolved before the task "
                           "(train/dependencies.py)")
        model, config = self.env.dependencies["classifier"]
        (mean,), (std,) = pipeline.normalization("digits")
        self._extractor = generative.classifier_extractor(
            model, image_size=config.dataset.image_size, mean=mean, std=std,
            key=f"digits-{config.model.attention}")
    return self._extractor

  def real_statistics(self) -> generative.RealStatistics:
    """The real side's statistics (evaluation/generative.py), cached on disk."""
    if self._real is None:
      ev, ds = self.config.eval, self.config.dataset
      key, fn = self.feature_extractor()
      folder = str(workdir.resolve(ds.image_dir)) if ds.image_dir else ""
      source = ds.name if not folder else (
          "celeb_a-dir-" + hashlib.sha1(folder.encode()).hexdigest()[:8])
      path = str(epath.Path(_stats_dir(self.config))
                 / f"{source}_{ev.real_split}_{ds.image_size}px_{ev.num_real}_{key}.npz")
      batches = gan_data.real_images(self.config, ev.real_split, limit=ev.num_real,
                                     batch_size=ev.batch_size)
      self._real = generative.real_statistics(
          path, batches, lambda images: generative.extract(fn, images, ev.batch_size)[0],
          num_kept=ev.num_kid_real, num_classes=self.num_classes)
    return self._real

  def evaluate(self, state):
    """FID / IS / KID / precision / recall (class diversity when conditional, conditional
    accuracy with the digits classifier) of `eval.num_samples` generated images; appended
    to <workdir>/fid_history.json."""
    ev = self.config.eval
    if ev.features == "none":
      return {}
    images, labels = self.samples(state, ev.num_samples)
    feats, logits = generative.extract(self.feature_extractor()[1], images, ev.batch_size)
    result = generative.scores(
        feats, logits, labels, images, self.real_statistics(), conditional=self.conditional,
        classifier_classes=ev.features == "digits" and self.conditional,
        kid_subsets=ev.kid_subsets, kid_subset_size=ev.kid_subset_size,
        num_classes=self.num_classes)
    generative.record_history(self.env.workdir, int(state["step"]), result)
    return result

  def export(self, state, split, out):
    """`eval.num_samples` images from the EMA generator (the evaluation's sampler):
    out/<class:04d>/<n:06d>.png per class for a conditional model, else out/<n:06d>.png,
    the folders an external FID tool (pytorch-fid, clean-fid) reads."""
    del split
    from PIL import Image  # pylint: disable=g-import-not-at-top
    n = int(self.config.eval.num_samples)
    classes = max(self.num_classes, 1) if self.conditional else 1
    # Chunks of whole class cycles keep every chunk class-balanced, like one call would.
    chunk = max(classes, int(self.config.eval.batch_size) // classes * classes)
    written, root = 0, epath.Path(out)
    for index in range(math.ceil(n / chunk)):
      images, labels = self.samples(state, min(chunk, n - written), seed_offset=index)
      if jax.process_index() == 0:
        for image, label in zip(images, labels):
          folder = root / f"{int(label):04d}" if self.conditional else root
          submission.save_png(Image.fromarray(np.asarray(image, np.uint8)),
                              folder / f"{written:06d}.png")
          written += 1
      else:
        written += len(images)
    kind = f"{classes} class folders" if self.conditional else "one folder"
    return f"wrote {written} samples as PNGs ({kind}) to {out}"


def _stats_dir(config) -> str:
  if config.eval.stats_dir:
    return config.eval.stats_dir
  data_dir = config.dataset.data_dir or os.environ.get(
      "TFDS_DATA_DIR", str(epath.Path("~/tensorflow_datasets").expanduser()))
  return str(epath.Path(data_dir) / "gan_statistics")


TASK = GAN
