"""Object detection: RetinaNet (focal loss, smooth-L1 boxes) and COCO mAP by COCOeval.

State: {"step", "params", "non_params", "opt_state"} of one model (base.TrainableModel),
`config.model.name = "retinanet"` on any ResNet / SE-ResNet / AA-ResNet backbone.
Data: data/detection.py (`digit_scenes`, `coco/2017`).

Loss (Lin et al. 2017, Sec. 4): anchors matched by IoU (≥ `loss.positive_iou`
positive, < `loss.negative_iou` background, ignored in between; each box's
best anchors positive too); focal loss (α, γ) summed over every non-ignored
anchor and class, plus `loss.box_weight` × smooth-L1 (β) of the encoded box
deltas over positive anchors, both divided by the number of positive anchors
in the global batch.

Evaluation (`config.eval`): `ops.boxes.postprocess` (per-level top-k, score
threshold, per-class NMS, ≤ `eval.max_detections`) on the first `eval.max_batches`
batches of each process (0: all), detections and ground truth gathered from
every process (`multihost_utils.process_allgather`), scored by pycocotools'
COCOeval: eval_map (mAP@[.5:.95], the headline), eval_ap50, eval_ap75,
eval_ap_small / medium / large (−1 where the split has no such objects).
"""

import json

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from clu import metrics
from etils import epath
from jax.experimental import multihost_utils

from attention_lab.checkpoints import backbone_weights
from attention_lab.data import detection as data
from attention_lab.data.info import data_info
from attention_lab.evaluation import coco, submission
from attention_lab.ops import boxes as box_ops
from attention_lab.train import optim
from attention_lab.train.tasks import base

_REPORTED = ("map", "ap50", "ap75", "ap_small", "ap_medium", "ap_large", "ar100")


@flax.struct.dataclass
class DetectionMetrics(metrics.Collection):
  loss: metrics.Average.from_output("loss")
  focal_loss: metrics.Average.from_output("focal_loss")
  box_loss: metrics.Average.from_output("box_loss")
  positives: metrics.Average.from_output("positives")


class Detection(base.Task):
  """One RetinaNet, one optimizer; whole-set COCO mAP on the eval split."""

  headline = "map"

  def __init__(self, config, env):
    super().__init__(config, env)
    info = data_info(config)
    self.num_classes = info.num_classes
    size = config.dataset.image_size
    a = config.anchors
    self.anchor_boxes = box_ops.anchors(
        size, min_level=config.model.min_level, max_level=config.model.max_level,
        anchor_scale=a.anchor_scale, scales_per_octave=a.scales_per_octave,
        aspect_ratios=tuple(a.aspect_ratios))
    per_location = box_ops.num_anchors_per_location(a.scales_per_octave, tuple(a.aspect_ratios))
    self.level_sizes = [(-(-size // 2 ** l)) ** 2 * per_location
                        for l in range(config.model.min_level, config.model.max_level + 1)]
    self.set_schedule(info.num_examples(config.dataset.train_split))
    self.net = base.TrainableModel(
        lambda rngs: base.create_model(config.model, num_classes=self.num_classes,
                                       num_anchors=per_location, image_size=size, rngs=rngs,
                                       **backbone_weights.model_options(config)),
        optim.make_optimizer(config.optimizer, self.schedule), config.seed,
        config.bn_group_size)
    self._jit_detect = None

  def init_state(self):
    return {"step": jnp.zeros((), jnp.int32), **self.net.init()}

  # Loss.
  def loss_and_metrics(self, cls_logits, box_deltas, batch):
    cfg = self.config.loss
    anchor_boxes = jnp.asarray(self.anchor_boxes)
    index, label = jax.vmap(lambda b, m: box_ops.match(
        anchor_boxes, b, m, positive_iou=cfg.positive_iou, negative_iou=cfg.negative_iou))(
            batch["boxes"].astype(jnp.float32), batch["box_mask"])
    positive = label == 1
    gt_labels = jnp.take_along_axis(batch["labels"], index, axis=1)
    targets = jax.nn.one_hot(gt_labels, self.num_classes) * positive[..., None]
    focal = optax.sigmoid_focal_loss(cls_logits.astype(jnp.float32), targets, alpha=cfg.alpha,
                                     gamma=cfg.gamma)
    focal = jnp.sum(focal * (label >= 0)[..., None])
    gt_boxes = jnp.take_along_axis(batch["boxes"].astype(jnp.float32), index[..., None], axis=1)
    box_targets = box_ops.encode(gt_boxes, anchor_boxes[None])
    box = smooth_l1(box_deltas.astype(jnp.float32) - box_targets, beta=cfg.smooth_l1_beta)
    box = box.sum(-1)
    box = jnp.sum(box * positive)
    num_positive = jnp.sum(positive)
    norm = jnp.maximum(num_positive, 1).astype(jnp.float32)
    focal, box = focal / norm, cfg.box_weight * box / norm
    loss = focal + box
    values = DetectionMetrics.single_from_model_output(
        loss=loss, focal_loss=focal, box_loss=box,
        positives=num_positive.astype(jnp.float32) / cls_logits.shape[0])
    return loss, values

  def train_step(self, state, batch):
    """With micro-batches each piece's loss is normalised by its own positive anchors (the
    mean of the pieces' losses, as k workers' gradients averaged)."""
    grads, (non_params, values) = self.net.gradients(
        state, batch, lambda model, b: self.loss_and_metrics(*model(b["image"]), b),
        self.config.microbatches)
    return {"step": state["step"] + 1, **self.net.update(state, grads, non_params)}, values

  def train_batches(self, start_step):
    return data.train_iterator(self.config, local_batch_size=self.env.local_batch_size,
                               start_step=start_step)

  def batch_spec(self):
    b, s, m = self.config.batch_size, self.config.dataset.image_size, self.config.dataset.max_boxes
    return {"image": jax.ShapeDtypeStruct((b, s, s, 3), jnp.float32),
            "boxes": jax.ShapeDtypeStruct((b, m, 4), jnp.float32),
            "labels": jax.ShapeDtypeStruct((b, m), jnp.int32),
            "box_mask": jax.ShapeDtypeStruct((b, m), jnp.bool_)}

  # Inference and evaluation.
  def detect(self, state, images):
    """images (B, S, S, C) → boxes (B, D, 4) yxyx input pixels, scores, classes, valid."""
    cls_logits, box_deltas = self.net.model(state, train=False)(images)
    cfg = self.config.eval
    anchor_boxes = jnp.asarray(self.anchor_boxes)
    return jax.vmap(lambda c, d: box_ops.postprocess(
        c, d, anchor_boxes, self.level_sizes, image_size=self.config.dataset.image_size,
        pre_nms_top_k=cfg.pre_nms_top_k, score_threshold=cfg.score_threshold,
        iou_threshold=cfg.iou_threshold, max_detections=cfg.max_detections))(
            cls_logits, box_deltas)

  def eval_step(self, state, batch):
    """Detections in original-image pixels, with the batch's ground truth passed through
    (so one gather keeps them aligned on every process)."""
    det_boxes, scores, classes, valid = self.detect(state, batch["image"])
    out = {k: v for k, v in batch.items() if k != "image"}
    out.update(det_boxes=det_boxes / batch["scale"][:, None, None], det_scores=scores,
               det_classes=classes, det_valid=valid)
    return out

  def _gathered_outputs(self, state, batches):
    if self._jit_detect is None:
      self._jit_detect = jax.jit(self.eval_step)
    outputs = []
    for batch in batches:
      out = self._jit_detect(state, self.env.global_batch(batch))
      outputs.append(multihost_utils.process_allgather(out, tiled=True))
    if not outputs:
      raise ValueError("the evaluation split yielded no batches")
    return {k: np.concatenate([np.asarray(o[k]) for o in outputs]) for k in outputs[0]}

  def evaluate(self, state):
    limit = self.config.eval.max_batches * self.env.local_batch_size or None
    batches = data.eval_batches(self.config, local_batch_size=self.env.local_batch_size,
                                limit=limit)
    out = self._gathered_outputs(state, batches)
    stats = coco_map(out, self.num_classes)
    return {f"eval_{k}": stats[k] for k in _REPORTED}

  def image_summaries(self, state):
    count = self.config.num_summary_images
    if not count:
      return {}
    batch = next(data.eval_batches(self.config, local_batch_size=self.env.local_batch_size,
                                   limit=self.env.local_batch_size))
    out = self._gathered_outputs(state, [batch])
    images = data.denormalize(batch["image"][:count])
    drawn = [draw_boxes(images[i], out["boxes"][i][out["box_mask"][i]] * out["scale"][i],
                        out["det_boxes"][i] * out["scale"][i], out["det_scores"][i],
                        out["det_classes"][i], out["det_valid"][i],
                        threshold=self.config.summary_score_threshold)
             for i in range(min(count, len(images)))]
    return {"detections": np.stack(drawn)}

  def export_results(self, state, split, out):
    """Writes COCO's results JSON of `split` (evaluation/submission.py) under `out`;
    (summary line, its path, the gathered eval-step outputs with each row's "image_id")."""
    from attention_lab.data import pipeline, sources  # pylint: disable=g-import-not-at-top
    config = self.config

    def with_id(example):
      """The evaluation's example and its image id: COCO's own, else the index."""
      image_id = example.get("image/id", example["index"])
      return {**data.preprocess(config, example), "image_id": np.int32(image_id)}

    batches = pipeline.padded_batches(
        pipeline.Indexed(sources.records(config.dataset, split)), with_id,
        batch_size=self.env.local_batch_size, pad_values={"image_id": -1},
        batch_map=data.normalize)
    gathered = self._gathered_outputs(state, batches)
    coco_names = config.dataset.name.startswith("coco")
    category_ids = submission.COCO_CATEGORY_IDS if coco_names else None
    results = submission.detection_results(gathered, gathered["image_id"], category_ids)
    name = f"detections_{submission.result_set(split)}_attention_lab_results.json"
    path = epath.Path(out) / name
    if jax.process_index() == 0:
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(json.dumps(results))
    line = f"wrote {len(results)} detections of {int(gathered['mask'].sum())} images to {path}"
    return line, str(path), gathered

  def export(self, state, split, out):
    return self.export_results(state, split, out)[0]


def smooth_l1(x, *, beta: float):
  """Fast R-CNN's smooth L1: ½x²/β for |x| < β, |x| − ½β otherwise (Huber with δ = β,
  divided by β); β ≤ 0: |x|."""
  return optax.huber_loss(x, delta=beta) / beta if beta > 0 else jnp.abs(x)


def coco_map(out: dict, num_classes: int) -> dict[str, float]:
  """COCOeval on gathered eval outputs (arrays over every eval image, padded with `mask`)."""
  ground_truth = coco.coco_ground_truth(
      out["boxes"], out["labels"], out["box_mask"], crowd=out["crowd"], area=out["area"],
      image_mask=out["mask"], image_sizes=out["image_size"], num_classes=num_classes)
  detections = coco.detections_array(out["det_boxes"], out["det_scores"], out["det_classes"],
                                     out["det_valid"], image_mask=out["mask"])
  return coco.evaluate(ground_truth, detections)


def draw_boxes(image, gt_boxes, boxes, scores, classes, valid, *, threshold=0.3,
               upscale=None) -> np.ndarray:
  """uint8 (H, W, 3) image with ground truth (green) and detections ≥ threshold (red,
  labelled class:score); small images are enlarged (nearest) to ≥ 256 pixels first."""
  from PIL import Image, ImageDraw  # pylint: disable=g-import-not-at-top
  image = np.asarray(image)
  if image.shape[-1] == 1:
    image = np.repeat(image, 3, -1)
  upscale = upscale or max(1, 256 // max(image.shape[:2]))
  picture = Image.fromarray(image).resize(
      (image.shape[1] * upscale, image.shape[0] * upscale), Image.NEAREST)
  draw = ImageDraw.Draw(picture)
  for y0, x0, y1, x1 in np.asarray(gt_boxes) * upscale:
    draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=(0, 255, 0))
  for (y0, x0, y1, x1), s, c, v in zip(np.asarray(boxes) * upscale, scores, classes, valid):
    if v and s >= threshold:
      draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=(255, 0, 0))
      draw.text((x0 + 1, y0 + 1), f"{int(c)}:{s:.2f}", fill=(255, 64, 64))
  return np.asarray(picture)



TASK = Detection
