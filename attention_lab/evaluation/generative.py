"""Generate-then-score evaluation for any image generator: sampling in chunks, feature
extractors, the real side's statistics cached on disk, the scores, and their history.

A generative task supplies `generate(key, labels) -> images in [−1, 1]` and an
extractor (`uint8 images (n, S, S, 3) -> (features (n, d), logits (n, k))`):
- `inception_extractor(path)`: pytorch-fid's FID InceptionV3 (evaluation/inception.py);
- `classifier_extractor(model, ...)`: a classifier of this library, its penultimate
  features and logits (the digits classifier of the default GAN).
`real_statistics` computes the real side once (mean and covariance of all its
features, up to `num_kept` features with labels for KID and precision/recall, and
each class's pixel diversity) and caches it as an .npz. `scores` gives FID, IS,
KID, k-NN precision and recall, and for class-conditional generators the
conditional accuracy (with a classifier on the same classes), the per-class
recall and the pixel-diversity ratio (evaluation/precision_recall.py).
`record_history` appends each evaluation to <workdir>/fid_history.json and redraws
<workdir>/fid_history.png.
"""

import dataclasses
import io
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from etils import epath
from flax import nnx

from attention_lab.evaluation import fid as fid_lib
from attention_lab.evaluation import precision_recall as pr

# Pixel diversity is measured on images average-pooled to at most this side, so the real
# side's per-class images stay small at ImageNet sizes (the digits are 32² already).
DIVERSITY_SIDE = 32


def to_uint8(images) -> np.ndarray:
  """Images in [−1, 1] → uint8 in [0, 255] (as a PNG of the sample would hold them)."""
  return np.clip(np.round((np.asarray(images, np.float32) + 1.0) * 127.5), 0, 255).astype(np.uint8)


def balanced_labels(n: int, num_classes: int) -> np.ndarray:
  """0, 1, …, C−1, 0, 1, … (n,): class-balanced evaluation labels (zeros when unconditional)."""
  return np.arange(n) % max(num_classes, 1)


def sample(generate, key, labels, batch_size: int) -> np.ndarray:
  """uint8 images for `labels` (n,), in chunks of `batch_size`; chunk i uses
  fold_in(key, i). `generate(key, labels)` returns images in [−1, 1]."""
  n = len(labels)
  return np.concatenate([
      to_uint8(generate(jax.random.fold_in(key, i), labels[i * batch_size:(i + 1) * batch_size]))
      for i in range(-(-n // batch_size))])


def grid(images, rows: int, cols: int) -> np.ndarray:
  """Images (rows·cols, S, S, 3) laid out row-major → (cols, rows·S, S, 3): column j holds
  images j, cols + j, 2·cols + j, … (one class per column when labels cycle over cols)."""
  s = images.shape[1]
  return images.reshape(rows, cols, s, s, -1).transpose(1, 0, 2, 3, 4).reshape(cols, rows * s, s,
                                                                                -1)


def diversity_view(images) -> np.ndarray:
  """uint8 images (n, S, S, c) average-pooled by an integer factor to at most DIVERSITY_SIDE."""
  images = np.asarray(images)
  f = max(1, -(-images.shape[1] // DIVERSITY_SIDE))
  if f == 1:
    return images
  n, h, w, c = images.shape
  pooled = images[:, :h // f * f, :w // f * f].reshape(n, h // f, f, w // f, f, c).mean((2, 4))
  return np.round(pooled).astype(np.uint8)


# ---------------------------------------------------------------- feature extractors
def inception_extractor(path: str):
  """(cache key, fn): fn maps uint8 images → (2048-d pool features, 1008 logits) of
  pytorch-fid's Inception from the weights file at `path`."""
  from attention_lab.evaluation import inception  # pylint: disable=g-import-not-at-top
  if not path or not epath.Path(path).is_file():
    raise ValueError(f"eval.inception_path must name pytorch-fid's weights file "
                     f"pt_inception-2015-12-05-6726825d.pth, got {path!r}")
  fn = inception.fid_inception(path, logits=True)
  key = "inception-" + epath.Path(path).name.split(".")[0]
  return key, lambda images: tuple(np.asarray(a) for a in fn(images))


def classifier_extractor(model, *, image_size: int, mean, std, key: str):
  """(cache key, fn): fn maps uint8 RGB images → (features, logits) of a classifier with
  `features(x)` and `head(features)` that reads grey images of side `image_size` normalised
  by the floats `mean` / `std` (of pixels in [0, 1]). The key gets a digest of the weights."""
  import hashlib  # pylint: disable=g-import-not-at-top
  graphdef, state = nnx.split(model)

  @jax.jit
  def fn(state, images):
    m = nnx.merge(graphdef, state)
    grey = images.astype(jnp.float32).mean(-1, keepdims=True)
    if grey.shape[1] != image_size:
      grey = jax.image.resize(grey, (grey.shape[0], image_size, image_size, 1), "linear")
    feats = m.features((grey / 255.0 - mean) / std)
    return feats, m.head(feats).astype(jnp.float32)

  digest = hashlib.sha1()
  for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)):
    digest.update(np.asarray(leaf).tobytes())
  return f"{key}-{digest.hexdigest()[:10]}", lambda images: tuple(
      np.asarray(a) for a in fn(state, images))


def extract(fn, images, batch_size: int):
  """(features, logits) of uint8 `images`, in chunks of `batch_size`."""
  out = [fn(images[i:i + batch_size]) for i in range(0, len(images), batch_size)]
  return np.concatenate([f for f, _ in out]), np.concatenate([l for _, l in out])


# ---------------------------------------------------------------- the real side
@dataclasses.dataclass
class RealStatistics:
  mu: np.ndarray  # (d,) mean of all features
  sigma: np.ndarray  # (d, d) their covariance
  features: np.ndarray  # (≤ num_kept, d) float32: KID and precision/recall
  labels: np.ndarray  # (≤ num_kept,) their classes (zeros without labels)
  class_distances: np.ndarray  # (classes,) mean pairwise pixel distance per class; (0,) if none


def real_statistics(path: str, batches, extract_fn, *, num_kept: int,
                    num_classes: int) -> RealStatistics:
  """The real side from `batches` ({"image": [−1, 1], "label"}) through `extract_fn`
  (uint8 → features), read from the .npz at `path` or computed and written there (process 0,
  atomically)."""
  fields = [f.name for f in dataclasses.fields(RealStatistics)]
  path = epath.Path(path)
  if path.exists():
    with np.load(io.BytesIO(path.read_bytes())) as f:
      if set(fields) <= set(f.files):
        return RealStatistics(**{k: f[k] for k in fields})
  feats, labels, views = [], [], []
  for batch in batches:
    images = to_uint8(batch["image"])
    feats.append(extract_fn(images))
    labels.append(np.asarray(batch["label"]))
    if num_classes >= 2:
      views.append(diversity_view(images))
  feats, labels = np.concatenate(feats), np.concatenate(labels)
  mu, sigma = fid_lib.feature_statistics(feats)
  distances = (pr.class_pairwise_distances(np.concatenate(views), labels, num_classes)
               if num_classes >= 2 else np.zeros(0))
  stats = RealStatistics(mu, sigma, feats[:num_kept].astype(np.float32), labels[:num_kept],
                         distances)
  if jax.process_index() == 0:
    buffer = io.BytesIO()
    np.savez(buffer, **dataclasses.asdict(stats))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(path)
    logging.info("Real statistics (%d images) cached in %s", len(feats), path)
  return stats


# ---------------------------------------------------------------- scores
def scores(features, logits, labels, images, real: RealStatistics, *, conditional: bool,
           classifier_classes: bool, kid_subsets: int, kid_subset_size: int,
           num_classes: int = 0) -> dict[str, float]:
  """eval_fid, eval_is, eval_kid, eval_precision, eval_recall of generated `features` /
  `logits` against `real`; with `conditional` also eval_class_recall and
  eval_class_diversity, and with `classifier_classes` (logits over the generator's
  classes) eval_conditional_accuracy. Precision and recall compare equally many
  generated and real features (the first of each)."""
  probs = np.asarray(jax.nn.softmax(jnp.asarray(logits, jnp.float32), axis=-1), np.float64)
  result = {
      "eval_fid": fid_lib.frechet_distance(*fid_lib.feature_statistics(features), real.mu,
                                           real.sigma),
      "eval_is": fid_lib.inception_score(probs, splits=min(10, len(probs)))[0],
      "eval_kid": fid_lib.kernel_inception_distance(
          features, real.features, num_subsets=kid_subsets, subset_size=kid_subset_size)[0],
  }
  n = min(len(features), len(real.features))
  result["eval_precision"], result["eval_recall"] = pr.precision_recall(real.features[:n],
                                                                        features[:n])
  if conditional:
    result["eval_class_recall"] = pr.class_recall(real.features, real.labels, features, labels)
    result["eval_class_diversity"] = pr.class_diversity(
        pr.class_pairwise_distances(diversity_view(images), labels, num_classes),
        real.class_distances)
  if classifier_classes:
    result["eval_conditional_accuracy"] = float(np.mean(np.argmax(logits, -1) == labels))
  return result


# ---------------------------------------------------------------- history
def record_history(workdir: str, step: int, result: dict) -> None:
  """Adds (replaces) `step`'s scores in <workdir>/fid_history.json and redraws
  fid_history.png (process 0 only)."""
  if jax.process_index() > 0:
    return
  path = epath.Path(workdir) / "fid_history.json"
  history = []
  if path.exists():
    history = [h for h in json.loads(path.read_text()) if h["step"] != step]
  history = sorted(history + [{"step": step, **result}], key=lambda h: h["step"])
  path.write_text(json.dumps(history, indent=1))
  plot_history({"": history}, str(epath.Path(workdir) / "fid_history.png"))


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
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=100)
  plt.close(fig)
  epath.Path(path).write_bytes(buffer.getvalue())
