"""GAN training (SAGAN recipe) and generate-then-score evaluation (FID, IS, KID).

Models: the registry's `sagan_generator` / `sagan_discriminator` (models/sagan.py;
spectral norm in both, conditional BN and the projection discriminator when
`config.conditional`), the context module `config.model.attention` (none | sa |
refined | hamburger | conv; `config.model.d_attention` may differ in D).

Training (SAGAN Sec. 4-5): hinge loss, D: E[relu(1 − D(x, y))] + E[relu(1 + D(G(z, ỹ), ỹ))],
G: −E[D(G(z, ỹ), ỹ)], z ~ N(0, I), fake labels ỹ uniform over the classes; G and D
each with its own optimizer (config.g_optimizer / config.d_optimizer; SAGAN's TTUR:
Adam β = (0, 0.9), 1e-4 for G, 4e-4 for D). One `train_step` runs `config.d_steps`
D updates then one G update, all in one jitted program (the D updates unrolled:
XLA:CPU ran a D update ~27× slower as a `lax.scan` body). Each D update sees
its own real images: the batch carries (B, d_steps, H, W, 3) images
(data/gan.py), i.e. d_steps·B real images per step.
D sees [real; fake] as one concatenated batch (one spectral-norm power iteration
per update, as BigGAN). In a D update G runs in training mode (batch statistics)
on fresh noise and its new BatchNorm running averages are discarded; only the G
update moves them. D runs in training mode in both updates (its spectral-norm
vectors advance in each, as PyTorch's `spectral_norm` does).

EMA: state["ema"] = decay·ema + (1 − decay)·θ_G after every step, from
`config.ema_start_step` on (θ_G copied before). `config.ema_decay = 0` (the
papers' setting) makes it equal to G's weights. Evaluation always uses
G(ema weights, G's BatchNorm running averages) in evaluation mode.

State: {"step", "generator": {"params", "rest", "opt_state"}, "discriminator": {...},
"ema": G's params, "rng": PRNG key}; the loop shards and checkpoints all of it, so a
resumed run continues exactly (both models, both optimizer states, EMA, RNG, data).

Evaluation (`config.eval`): `num_samples` images from a fixed key (class-balanced
labels when conditional; 50,000 for paper numbers) → features of
- "inception": pytorch-fid's FID InceptionV3 (evaluation/inception.py) from the
  weights file `eval.inception_path` (pt_inception-2015-12-05-6726825d.pth);
- "digits": the penultimate features and logits of a digits classifier trained
  by this library: the default classification experiment (`eval.classifier_config`,
  configs/default.py) in `eval.classifier_workdir`; trained there first when that
  workdir holds no finished run (about a minute on a CPU);
- "none": no scores (sample grids only);
then FID (lower is better: the headline), Inception Score, KID, and with the
digits classifier the conditional accuracy: the share of class-k samples the
classifier labels k. Real-side features (`eval.real_split`, at most
`eval.num_real` images) are computed once and cached as an .npz in
`eval.stats_dir` (default: <TFDS data_dir>/gan_statistics), keyed by dataset,
split, size, count and feature extractor. Each evaluation appends its scores to
<workdir>/fid_history.json and redraws <workdir>/fid_history.png.
Cost per evaluation: num_samples G forwards plus feature extraction; the FID's
matrix square root is O(d³) (d = 2048 for Inception).
"""

import hashlib
import json
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from clu import metrics
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import attention_lab.models.sagan  # noqa: F401  (registers the SAGAN models)
from attention_lab import models
from attention_lab.data import gan as gan_data
from attention_lab.evaluation import fid as fid_lib
from attention_lab.train import optim, upstream
from attention_lab.train.tasks import base

FEATURES = ("inception", "digits", "none")


@flax.struct.dataclass
class GanMetrics(metrics.Collection):
  d_loss: metrics.Average.from_output("d_loss")
  g_loss: metrics.Average.from_output("g_loss")
  d_real: metrics.Average.from_output("d_real")
  d_fake: metrics.Average.from_output("d_fake")


def to_uint8(images) -> np.ndarray:
  """Images in [−1, 1] → uint8 in [0, 255] (as a PNG of the sample would hold them)."""
  return np.clip(np.round((np.asarray(images, np.float32) + 1.0) * 127.5), 0, 255).astype(np.uint8)


def ema_update(ema, params, decay):
  """decay·ema + (1 − decay)·params, leaf by leaf (decay a scalar, possibly traced)."""
  return jax.tree.map(lambda e, p: (decay * e + (1 - decay) * p).astype(e.dtype), ema, params)


def hinge_d_loss(real_logits, fake_logits):
  return jnp.mean(jax.nn.relu(1 - real_logits)) + jnp.mean(jax.nn.relu(1 + fake_logits))


class GAN(base.Task):
  """SAGAN-style conditional or unconditional GAN; evaluation by FID (lower is better)."""

  headline = "fid"  # lower is better

  def __init__(self, config, env):
    super().__init__(config, env)
    self.info = gan_data.dataset_info(config)
    self.conditional = bool(config.conditional)
    if self.conditional and self.info.num_classes < 2:
      raise ValueError(f"conditional=True needs a labelled dataset; {config.dataset.name!r} has "
                       f"{self.info.num_classes} classes")
    self.num_classes = self.info.num_classes if self.conditional else 0
    self.d_steps = int(config.d_steps)
    if self.d_steps < 1:
      raise ValueError(f"d_steps must be >= 1, got {config.d_steps}")
    if not 0.0 <= config.ema_decay < 1.0:
      raise ValueError(f"ema_decay must be in [0, 1), got {config.ema_decay}")
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
    if m.dtype not in base.DTYPES:
      raise ValueError(f"model.dtype must be one of {sorted(base.DTYPES)}, got {m.dtype!r}")
    kw = dict(num_classes=self.num_classes, resolution=self.config.dataset.image_size,
              width=m.width, spectral_norm=m.spectral_norm, dtype=base.DTYPES[m.dtype],
              context_side=m.get("context_side") or None, rngs=rngs)
    if which == "generator":
      return models.create("sagan_generator", attention=m.attention, latent_dim=m.latent_dim,
                           class_embedding=m.get("class_embedding", 0), **kw)
    return models.create("sagan_discriminator", attention=m.get("d_attention") or m.attention,
                         **kw)

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
      z, y = self._latent(k, b)
      fake = jax.lax.stop_gradient(self.generator.model(g_state, train=True)(z, y))

      def loss_fn(params):
        disc = self.discriminator.model({**d_state, "params": params}, train=True)
        both = jnp.concatenate([real.astype(fake.dtype), fake])
        both_y = None if y is None else jnp.concatenate([real_y, y])
        logits = disc(both, both_y)
        loss = hinge_d_loss(logits[:b], logits[b:])
        return loss, (base.non_params(disc), (loss, logits[:b].mean(), logits[b:].mean()))

      grads, (rest, values) = jax.grad(loss_fn, has_aux=True)(d_state["params"])
      return self.discriminator.update(d_state, grads, rest), values

    d_state, values = state["discriminator"], []
    for i in range(self.d_steps):  # unrolled: ~27× faster on XLA:CPU than a lax.scan body
      d_state, v = d_update(d_state, (images[:, i], labels[:, i], keys[i]))
      values.append(v)
    d_loss, d_real, d_fake = (jnp.stack(v) for v in zip(*values))

    z, y = self._latent(keys[-1], b)

    def g_loss_fn(params):
      gen = self.generator.model({**g_state, "params": params}, train=True)
      disc = self.discriminator.model(d_state, train=True)
      loss = -jnp.mean(disc(gen(z, y), y))
      return loss, (base.non_params(gen), base.non_params(disc), loss)

    grads, (g_rest, d_rest, g_loss) = jax.grad(g_loss_fn, has_aux=True)(g_state["params"])
    g_state = self.generator.update(g_state, grads, g_rest)
    step = state["step"] + 1
    decay = jnp.where(step > self.config.get("ema_start_step", 0), self.config.ema_decay, 0.0)
    values = GanMetrics.single_from_model_output(
        d_loss=d_loss.mean(), g_loss=g_loss, d_real=d_real.mean(), d_fake=d_fake.mean())
    return {"step": step, "generator": g_state,
            "discriminator": {**d_state, "rest": d_rest},
            "ema": ema_update(state["ema"], g_state["params"], decay), "rng": rng}, values

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
        model = nnx.merge(self.generator.eval_graphdef, ema, g_state["rest"], copy=True)
        z = jax.random.normal(key, (labels.shape[0], self.latent_dim), jnp.float32)
        return model(z, labels if self.conditional else None)

      self._generate = jax.jit(gen, out_shardings=NamedSharding(self.env.mesh, P()))
    labels = jnp.asarray(np.resize(np.asarray(labels, np.int32), n))
    return np.asarray(self._generate(state["generator"], state["ema"], key, labels))

  def _eval_labels(self, n):
    return np.arange(n) % max(self.num_classes, 1)

  def samples(self, state, n: int, *, seed_offset: int = 0):
    """(uint8 images (n, S, S, 3), labels (n,)) from the fixed evaluation key, in chunks of
    `eval.batch_size`."""
    batch = self.config.eval.batch_size
    base_key = jax.random.key(self.config.eval.seed + seed_offset)
    labels = self._eval_labels(n)
    chunks = [to_uint8(self.generate(state, jax.random.fold_in(base_key, i),
                                     labels[i * batch:(i + 1) * batch], min(batch, n - i * batch)))
              for i in range(-(-n // batch))]
    return np.concatenate(chunks), labels

  def image_summaries(self, state):
    """A fixed-noise grid: one image per class (first `eval.grid_classes`), each a column of
    `eval.grid_rows` samples (unconditional: grid_classes columns)."""
    rows, cols = self.config.eval.grid_rows, self.config.eval.grid_classes
    if self.conditional:
      cols = min(cols, self.num_classes)
    labels = np.tile(np.arange(cols), rows)
    images = to_uint8(self.generate(state, jax.random.key(self.config.eval.seed + 1), labels,
                                    rows * cols))
    s = images.shape[1]
    grid = images.reshape(rows, cols, s, s, 3).transpose(1, 0, 2, 3, 4).reshape(cols, rows * s,
                                                                                 s, 3)
    return {"samples": grid}

  # ---------------------------------------------------------------- features
  def feature_extractor(self):
    """(key, fn): fn maps uint8 images (n, S, S, 3) → (features (n, d), logits (n, k))."""
    if self._extractor is None:
      kind = self.config.eval.features
      self._extractor = (_inception_extractor(self.config.eval) if kind == "inception"
                         else _digits_extractor(self.config.eval, self.env.workdir))
    return self._extractor

  def _features(self, images):
    _, fn = self.feature_extractor()
    batch = self.config.eval.batch_size
    out = [fn(images[i:i + batch]) for i in range(0, len(images), batch)]
    return np.concatenate([f for f, _ in out]), np.concatenate([l for _, l in out])

  def real_features(self):
    """(mu, sigma, features (≤ eval.num_kid_real, d)) of the real side, cached on disk."""
    if self._real is not None:
      return self._real
    ev, ds = self.config.eval, self.config.dataset
    key, _ = self.feature_extractor()
    source = ds.name if not ds.get("image_dir") else (
        "celeb_a-dir-" + hashlib.sha1(os.path.abspath(ds.image_dir).encode()).hexdigest()[:8])
    path = os.path.join(_stats_dir(self.config),
                        f"{source}_{ev.real_split}_{ds.image_size}px_{ev.num_real}_{key}.npz")
    if os.path.exists(path):
      with np.load(path) as f:
        self._real = (f["mu"], f["sigma"], f["features"])
      return self._real
    feats = []
    for batch in gan_data.real_images(self.config, ev.real_split, limit=ev.num_real,
                                      batch_size=ev.batch_size):
      feats.append(self._features(to_uint8(batch["image"]))[0])
    feats = np.concatenate(feats)
    mu, sigma = fid_lib.feature_statistics(feats)
    kid_feats = feats[:ev.num_kid_real].astype(np.float32)
    if jax.process_index() == 0:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      tmp = path + f".tmp{os.getpid()}.npz"
      np.savez(tmp, mu=mu, sigma=sigma, features=kid_feats)
      os.replace(tmp, path)
      logging.info("Real %s statistics (%d images) cached in %s", source, len(feats), path)
    self._real = (mu, sigma, kid_feats)
    return self._real

  def evaluate(self, state):
    """FID / IS / KID (and conditional accuracy with the digits classifier) of
    `eval.num_samples` generated images; appended to <workdir>/fid_history.json."""
    ev = self.config.eval
    if ev.features == "none":
      return {}
    images, labels = self.samples(state, ev.num_samples)
    feats, logits = self._features(images)
    mu, sigma, real_feats = self.real_features()
    probs = np.asarray(jax.nn.softmax(jnp.asarray(logits, jnp.float32), axis=-1), np.float64)
    result = {
        "eval_fid": fid_lib.frechet_distance(*fid_lib.feature_statistics(feats), mu, sigma),
        "eval_is": fid_lib.inception_score(probs, splits=min(10, len(probs)))[0],
        "eval_kid": fid_lib.kernel_inception_distance(
            feats, real_feats, num_subsets=ev.kid_subsets, subset_size=ev.kid_subset_size)[0],
    }
    if ev.features == "digits" and self.conditional:
      result["eval_conditional_accuracy"] = float(np.mean(np.argmax(logits, -1) == labels))
    self._record(int(state["step"]), result)
    return result

  def _record(self, step, result):
    if jax.process_index() > 0:
      return
    path = os.path.join(self.env.workdir, "fid_history.json")
    history = []
    if os.path.exists(path):
      with open(path) as f:
        history = [h for h in json.load(f) if h["step"] != step]
    history = sorted(history + [{"step": step, **result}], key=lambda h: h["step"])
    with open(path, "w") as f:
      json.dump(history, f, indent=1)
    plot_history({"": history}, os.path.join(self.env.workdir, "fid_history.png"))


def plot_history(histories: dict[str, list[dict]], path: str, key: str = "eval_fid") -> None:
  """Line plot of `key` over training steps, one line per named history."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(5, 3.2))
  for name, history in histories.items():
    ax.plot([h["step"] for h in history], [h[key] for h in history], marker="o", label=name or None)
  ax.set_xlabel("step")
  ax.set_ylabel(key.removeprefix("eval_").upper() + " (lower is better)")
  ax.set_yscale("log")
  if any(histories):
    ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _stats_dir(config) -> str:
  if config.eval.get("stats_dir"):
    return config.eval.stats_dir
  data_dir = config.dataset.data_dir or os.environ.get(
      "TFDS_DATA_DIR", os.path.join(os.path.expanduser("~"), "tensorflow_datasets"))
  return os.path.join(data_dir, "gan_statistics")


def _inception_extractor(ev):
  from attention_lab.checkpoints import torch_reader  # pylint: disable=g-import-not-at-top
  from attention_lab.evaluation import inception  # pylint: disable=g-import-not-at-top
  if not ev.inception_path or not os.path.isfile(ev.inception_path):
    raise ValueError(f"eval.inception_path must name pytorch-fid's weights file "
                     f"pt_inception-2015-12-05-6726825d.pth, got {ev.inception_path!r}")
  params = inception.prepare(torch_reader.load_torch_state_dict(ev.inception_path))

  @jax.jit
  def fn(params, images):
    feats = inception.pool_features(params, images.astype(jnp.float32))
    return feats, feats @ params["fc"]["kernel"] + params["fc"]["bias"]

  key = "inception-" + os.path.basename(ev.inception_path).split(".")[0]
  return key, lambda images: tuple(np.asarray(a) for a in fn(params, images))


def digits_classifier(ev, workdir: str):
  """The trained classifier (evaluation mode) and its config: restored from
  `ev.classifier_workdir` ("" = <workdir>/digits_classifier), trained there first when its
  run is not finished."""
  config = upstream.load_config_file(ev.classifier_config, "eval.classifier_config")
  if config.get("task", "classification") != "classification" or config.dataset.name != "digits":
    raise ValueError(f"eval.classifier_config must be a digits classification config, got "
                     f"{ev.classifier_config!r}")
  cls_workdir = ev.classifier_workdir or os.path.join(workdir, "digits_classifier")
  trainer = upstream.trained(config, cls_workdir)
  return trainer.task.model(trainer.state), config


def _digits_extractor(ev, workdir):
  from attention_lab.data import pipeline  # pylint: disable=g-import-not-at-top
  model, config = digits_classifier(ev, workdir)
  graphdef, state = nnx.split(model)
  (mean,), (std,) = pipeline._STATS["digits"]  # pylint: disable=protected-access
  size = config.dataset.image_size

  @jax.jit
  def fn(state, images):
    m = nnx.merge(graphdef, state)
    grey = images.astype(jnp.float32).mean(-1, keepdims=True)
    if grey.shape[1] != size:
      grey = jax.image.resize(grey, (grey.shape[0], size, size, 1), "linear")
    feats = m.features((grey / 255.0 - mean) / std)
    return feats, m.head(feats).astype(jnp.float32)

  digest = hashlib.sha1()
  for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)):
    digest.update(np.asarray(leaf).tobytes())
  key = f"digits-{config.model.attention}-{digest.hexdigest()[:10]}"
  return key, lambda images: tuple(np.asarray(a) for a in fn(state, images))


TASK = GAN
