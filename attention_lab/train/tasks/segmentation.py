"""Semantic segmentation: per-pixel softmax cross-entropy with an ignore label; whole-set mIoU.

State: {"step", "params", "non_params", "opt_state"} of one model (base.TrainableModel),
built by `config.model` with `num_classes` from the dataset (models/segmentation.py:
`deeplab_v2`, `hamnet`, or `segmenter` with `head`).

Loss: mean over labelled pixels (label ≠ 255) of softmax cross-entropy of the
logits (upsampled to the input by the model), plus `aux_loss_weight` × the same
loss of the auxiliary FCN head when that weight is positive (mmseg ADE20K
HamNet: 0.4).

Evaluation (data/segmentation.py pads every image to eval_size with label 255):
one int32 confusion matrix (rows true, columns predicted) summed over the whole
split, exact whatever the batch padding or device count; from it mIoU (the
headline, `eval_miou`), per-class IoU (`eval_iou/<class>`), pixel accuracy and
mean class accuracy (evaluation/segmentation.py). Predictions: softmax averaged
over `config.eval.scales` (the padded canvas resized by each scale and the
probabilities resized back) and, with `config.eval.flip`, the left-right
flipped input; each forward pass on the whole canvas, or in sliding windows of
`config.eval.window` pixels at stride `config.eval.stride` with the logits of
overlapping windows averaged.

Weights from elsewhere (`config.init_from`, on a fresh start): a torch ResNet
`.pth` file (torchvision's or a deep-stem one; read without torch, mapped by
name; checkpoints/; the backbone is then built with torch's padding), an
orbax checkpoint of our classification task (a workdir, its checkpoints/
folder or one step folder), or a classification config file
(`path.py[:preset]`), trained first into <workdir>/pretrained (resumed there
if unfinished); each fills the backbone's parameters and BatchNorm statistics.
"""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from clu import metrics
from etils import epath

from attention_lab.checkpoints import backbone_weights
from attention_lab.data import segmentation as data
from attention_lab.data.info import data_info
from attention_lab.data.transforms import image as image_ops
from attention_lab.evaluation import segmentation as evaluation
from attention_lab.evaluation import submission
from attention_lab.train import optim
from attention_lab.train.tasks import base

IGNORE = data.IGNORE


@flax.struct.dataclass
class ConfusionMatrix(metrics.Metric):
  """A summed int32 confusion matrix (clu Metric; merge adds)."""

  matrix: jax.Array

  @classmethod
  def from_model_output(cls, *, confusion, **_):
    return cls(matrix=confusion)

  def merge(self, other):
    return type(self)(matrix=self.matrix + other.matrix)

  def reduce(self):
    return type(self)(matrix=self.matrix.sum(0) if self.matrix.ndim == 3 else self.matrix)

  def compute(self):
    return self.matrix


@flax.struct.dataclass
class TrainMetrics(metrics.Collection):
  loss: metrics.Average.from_output("loss")
  pixel_accuracy: metrics.Average.from_output("pixel_accuracy")


@flax.struct.dataclass
class EvalMetrics(metrics.Collection):
  loss: metrics.Average.from_output("loss")
  confusion: ConfusionMatrix


def pixel_cross_entropy(logits, labels, ignore_label: int = IGNORE):
  """(mean over labelled pixels, per-example mean, per-example count) of softmax CE."""
  valid = labels != ignore_label
  ce = optax.softmax_cross_entropy_with_integer_labels(
      logits.astype(jnp.float32), jnp.where(valid, labels, 0)) * valid
  count = valid.sum(axis=tuple(range(1, labels.ndim)))
  per_example = ce.sum(axis=tuple(range(1, labels.ndim))) / jnp.maximum(count, 1)
  return ce.sum() / jnp.maximum(valid.sum(), 1), per_example, count


def overlay(image, labels, alpha: float = 0.5) -> np.ndarray:
  """uint8 image (N, H, W, 3) with the class colours of `labels` blended in (255 untouched,
  class 0 = background shown as the image)."""
  colours = submission.voc_colour_map()[np.asarray(labels)]
  blend = (1 - alpha) * image + alpha * colours
  keep = ((labels == IGNORE) | (labels == 0))[..., None]
  return np.where(keep, image, blend).round().astype(np.uint8)


class Segmentation(base.Task):
  """One segmentation network, one optimizer; whole-set confusion-matrix metrics."""

  headline = "miou"

  def __init__(self, config, env):
    super().__init__(config, env)
    self.spec = data.facts(config.dataset.name)
    self.num_classes = len(self.spec.mask_classes)
    self.aux_weight = float(config.aux_loss_weight)
    self.set_schedule(data_info(config).num_examples(config.dataset.train_split))
    extra = {"aux_head": True} if self.aux_weight > 0 else {}
    extra.update(backbone_weights.model_options(config))  # torch weights: torch padding
    self.net = base.TrainableModel(
        lambda rngs: base.create_model(config.model, num_classes=self.num_classes, rngs=rngs,
                                       **extra),
        optim.make_optimizer(config.optimizer, self.schedule), config.seed,
        config.bn_group_size)
    ev = config.eval
    self.eval_scales = tuple(ev.scales)
    self.eval_flip = bool(ev.flip)
    self.eval_window = int(ev.window)
    self.eval_stride = int(ev.stride) or max(1, self.eval_window * 2 // 3)
    if not self.eval_scales or min(self.eval_scales) <= 0:
      raise ValueError(f"eval.scales must be positive numbers, got {self.eval_scales}")
    self._jit_predict = None

  def init_state(self):
    return {"step": jnp.zeros((), jnp.int32), **self.net.init()}

  def model(self, state):
    """The trained network in evaluation mode."""
    return self.net.model(state, train=False)

  # Training.
  def loss_and_metrics(self, model, batch):
    labels = batch["label"]
    if self.aux_weight > 0:
      logits, aux = model(batch["image"], with_aux=True)
      loss = pixel_cross_entropy(logits, labels)[0]
      loss = loss + self.aux_weight * pixel_cross_entropy(aux, labels)[0]
    else:
      logits = model(batch["image"])
      loss = pixel_cross_entropy(logits, labels)[0]
    valid = labels != IGNORE
    accuracy = jnp.sum((jnp.argmax(logits, -1) == labels) & valid) / jnp.maximum(valid.sum(), 1)
    return loss, TrainMetrics.single_from_model_output(loss=loss, pixel_accuracy=accuracy)

  def train_step(self, state, batch):
    grads, (non_params, values) = self.net.gradients(state, batch, self.loss_and_metrics,
                                               self.config.microbatches)
    return {"step": state["step"] + 1, **self.net.update(state, grads, non_params)}, values

  def train_batches(self, start_step):
    return data.train_iterator(self.config, local_batch_size=self.env.local_batch_size,
                               start_step=start_step)

  def batch_spec(self):
    b, s = self.config.batch_size, self.config.dataset.crop_size
    return {"image": jax.ShapeDtypeStruct((b, s, s, 3), jnp.float32),
            "label": jax.ShapeDtypeStruct((b, s, s), jnp.int32)}

  # Evaluation.
  def _windows(self, model, x):
    """Logits of the whole canvas, or averaged over sliding windows."""
    h, w = x.shape[1:3]
    size = self.eval_window
    if not size or (size >= h and size >= w):
      return model(x)

    def starts(n):
      if size >= n:
        return [0]
      s = list(range(0, n - size, self.eval_stride))
      return s + [n - size]

    total = jnp.zeros((*x.shape[:3], self.num_classes), jnp.float32)
    count = jnp.zeros((1, h, w, 1), jnp.float32)
    for i in starts(h):
      for j in starts(w):
        patch = x[:, i:i + size, j:j + size]
        total = total.at[:, i:i + size, j:j + size].add(model(patch))
        count = count.at[:, i:i + size, j:j + size].add(1.0)
    return total / count

  def predict(self, state, images):
    """Class probabilities (B, H, W, classes): scales × flips averaged (see module doc)."""
    model = self.model(state)
    h, w = images.shape[1:3]
    probs = jnp.zeros((*images.shape[:3], self.num_classes), jnp.float32)
    for scale in self.eval_scales:
      size = (max(1, round(h * scale)), max(1, round(w * scale)))
      x = images if size == (h, w) else jax.image.resize(
          images, (images.shape[0], *size, images.shape[3]), "bilinear")
      for flip in ((False, True) if self.eval_flip else (False,)):
        logits = self._windows(model, x[:, :, ::-1] if flip else x)
        p = jax.nn.softmax(logits, axis=-1)
        p = p[:, :, ::-1] if flip else p
        if size != (h, w):
          p = jax.image.resize(p, probs.shape, "bilinear")
        probs = probs + p
    return probs

  def eval_step(self, state, batch):
    probs = self.predict(state, batch["image"])
    labels = jnp.where(batch["mask"][:, None, None], batch["label"], IGNORE)
    confusion = evaluation.confusion_matrix(labels, jnp.argmax(probs, -1), self.num_classes)
    valid = labels != IGNORE
    nll = -jnp.log(jnp.take_along_axis(probs / len(self.eval_scales) / (2 if self.eval_flip
                                                                        else 1),
                                       jnp.where(valid, labels, 0)[..., None], -1)[..., 0]
                   + 1e-12) * valid
    count = valid.sum((1, 2))
    per_example = nll.sum((1, 2)) / jnp.maximum(count, 1)
    return EvalMetrics.single_from_model_output(loss=per_example, confusion=confusion,
                                                mask=batch["mask"] & (count > 0))

  def evaluate(self, state):
    batches = data.eval_batches(self.config, local_batch_size=self.env.local_batch_size)
    total = self.evaluate_batches(state, self.eval_step, batches).compute()
    confusion = submission.host(total["confusion"])
    result = {"eval_loss": float(submission.host(total["loss"]))}
    result.update({f"eval_{k}": v for k, v in
                   evaluation.summary(confusion, list(self.spec.mask_classes)).items()})
    return result

  def image_summaries(self, state):
    """The first few eval images: [image | ground truth | prediction], overlaid."""
    count = int(self.config.num_summary_images)
    if count <= 0:
      return {}
    batch = next(data.eval_batches(self.config, local_batch_size=self.env.local_batch_size,
                                   limit=count))
    if self._jit_predict is None:
      self._jit_predict = jax.jit(lambda s, x: jnp.argmax(self.predict(s, x), -1))
    predicted = self._jit_predict(state, self.env.global_batch(batch)["image"])
    predicted = submission.host(predicted)
    n = min(count, int(batch["mask"].sum()))
    mean, std = (np.asarray(v, np.float32) for v in self.spec.stats)
    image = np.clip((batch["image"][:n] * std + mean) * 255, 0, 255)
    label = batch["label"][:n]
    panels = [image.round().astype(np.uint8), overlay(image, label),
              overlay(image, np.where(label == IGNORE, IGNORE, predicted[:n]))]
    return {"segmentation": np.concatenate(panels, axis=2)}

  def export(self, state, split, out):
    """One PNG per image of `split` in the benchmark's layout (evaluation/submission.py),
    predicted as the evaluation predicts, at the image's original size."""
    from attention_lab.data import availability, pipeline, sources  # pylint: disable=g-import-not-at-top
    d = self.config.dataset
    sources.version_dir(d)  # prepared on first use, where it may be
    availability.require_split(d, availability.find_prepared(d.name, d.data_dir), split)
    folder, encode, palette = submission.segmentation_layout(d.name)
    folder = epath.Path(out) / folder
    local, process = self.env.local_batch_size, jax.process_index()
    predict = jax.jit(self.predict)

    def canvas(example):
      """The evaluation's input (a dummy label: test splits have none), the image's size
      as stored and as decoded (dataset.resize), and its id."""
      image = example[self.spec.image_key]
      label = np.zeros(image.shape[:2], np.uint8)
      x = data.preprocess(self.config, {self.spec.image_key: image, self.spec.label_key: label})
      decoded = (d.resize, d.resize) if d.resize else image.shape[:2]
      name = submission.text(example["image_id"]) if "image_id" in example else \
          f"{example['index']:05d}"
      return {"image": x["image"], "original": np.asarray(image.shape[:2], np.int32),
              "decoded": np.asarray(decoded, np.int32), "name": np.bytes_(name)}

    written = 0
    for batch in pipeline.padded_batches(
        pipeline.Indexed(sources.records(d, split)), canvas, batch_size=local,
        batch_map=data.normalizer(d.name)):
      probs = submission.host(predict(state, self.env.global_batch(
          {"image": batch["image"]})["image"]))
      probs = probs[process * local:(process + 1) * local] if jax.process_count() > 1 else probs
      for row in np.flatnonzero(batch["mask"]):
        decoded, original = batch["decoded"][row], tuple(batch["original"][row])
        shape = decoded.astype(np.float32)  # as transforms.segmentation.evaluate fits it
        fitted = np.rint(shape * min(np.float32(1), np.float32(d.eval_size) / shape.max()))
        fitted = fitted.astype(int)
        p = probs[row][:fitted[0], :fitted[1]]
        if tuple(fitted) != original:
          p = image_ops.bilinear(p, original)
        submission.palette_png(encode(np.argmax(p, -1)),
                               folder / f"{batch['name'][row].decode()}.png", palette=palette)
        written += 1
    return f"wrote {written} segmentation PNGs to {folder}"


TASK = Segmentation
