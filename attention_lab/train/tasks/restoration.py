"""Image restoration (denoising, 3D→2D projection): L1/L2 loss; whole-set PSNR / SSIM / NRMSE.

State: {"step", "params", "non_params", "opt_state"} of one model (base.TrainableModel),
e.g. `unet2d`, `unet3d` or `unet_projection` (models/unet.py), whose output has
the input's channel count.

Training: random patches (data/restoration.py), per-pixel loss `config.loss`:
"mae" (L1, CARE's default) or "mse" (L2), averaged over pixels and batch.

Evaluation (`evaluate`): every eval image or volume is predicted whole, tile
by tile (evaluation/tiling.py: `config.eval.tile_size`, `tile_overlap`;
memory bounded by the tile; windows split over processes and devices;
optionally only `max_examples` images, centre-cropped to `crop_size`), then
scored on the host in float64 under `config.eval.protocol`
(evaluation/restoration.py: "care" = percentile-normalised target, min-MSE
affine rescaling of the prediction, data_range 1 — the CARE protocol behind
SAO Table 7; "plain" = the values as they are with `data_range`). The same
metrics of the raw input (for a projection: its maximum-intensity projection
over Z) show the gain. Reported: eval_psnr (headline), eval_ssim, eval_nrmse,
eval_input_psnr, eval_input_ssim, eval_input_nrmse, each the mean over the eval
images (as CARE and the SAO paper average per image), and eval_psnr_gain.
"""

import io
import math

import flax
import jax
import jax.numpy as jnp
import numpy as np
from clu import metrics
from etils import epath
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from attention_lab.data import restoration as data
from attention_lab.data.info import data_info
from attention_lab.evaluation import restoration as measures
from attention_lab.evaluation.tiling import predict_tiled
from attention_lab.train import optim
from attention_lab.train.tasks import base

LOSSES = ("mae", "mse")
MAX_PICTURE_SIDE = 512


@flax.struct.dataclass
class RestorationMetrics(metrics.Collection):
  loss: metrics.Average.from_output("loss")
  mae: metrics.Average.from_output("mae")
  mse: metrics.Average.from_output("mse")


class Restoration(base.Task):
  """One restoration network, one optimizer; whole-set PSNR / SSIM / NRMSE on full images."""

  headline = "psnr"

  def __init__(self, config, env):
    super().__init__(config, env)
    if config.loss not in LOSSES:
      raise ValueError(f"loss must be one of {LOSSES}, got {config.loss!r}")
    self.info = data_info(config)
    self.info.check_split(config.dataset.eval_split, "dataset.eval_split")
    patch = tuple(config.dataset.patch_size)
    if len(patch) != self.info.input_rank:
      raise ValueError(f"dataset.patch_size must have {self.info.input_rank} sides for "
                       f"{config.dataset.name}, got {patch}")
    self.set_schedule(self.info.num_examples(config.dataset.train_split))
    self.net = base.TrainableModel(
        lambda rngs: base.create_model(config.model, in_channels=self.info.channels, rngs=rngs),
        optim.make_optimizer(config.optimizer, self.schedule), config.seed,
        config.bn_group_size)
    self.multiple = self._divisors(config.model)
    self._predict = None
    self._picture = None

  def _divisors(self, model_config) -> tuple[int, ...]:
    """What each input side must be divisible by: 2^(depth−1) (and 2^proj_depth in Y, X)."""
    unet = 2 ** (model_config.depth - 1)
    if self.info.target_rank < self.info.input_rank:  # projection: Z untiled
      proj = 2 ** model_config.proj_depth
      return (1,) + (math.lcm(unet, proj),) * self.info.target_rank
    return (unet,) * self.info.input_rank

  def init_state(self):
    return {"step": jnp.zeros((), jnp.int32), **self.net.init()}

  def model(self, state):
    """The trained network in evaluation mode."""
    return self.net.model(state, train=False)

  def loss_and_metrics(self, prediction, target):
    error = prediction.astype(jnp.float32) - target.astype(jnp.float32)
    axes = tuple(range(1, error.ndim))
    mae, mse = jnp.mean(jnp.abs(error), axis=axes), jnp.mean(error**2, axis=axes)
    per_example = mae if self.config.loss == "mae" else mse
    values = RestorationMetrics.single_from_model_output(loss=per_example, mae=mae, mse=mse)
    return jnp.mean(per_example), values

  def train_step(self, state, batch):
    grads, (rest, values) = self.net.gradients(
        state, batch, lambda model, b: self.loss_and_metrics(model(b["input"]), b["target"]),
        self.config.microbatches)
    return {"step": state["step"] + 1, **self.net.update(state, grads, rest)}, values

  def train_batches(self, start_step):
    return data.train_iterator(
        self.config, local_batch_size=self.env.local_batch_size, start_step=start_step)

  def batch_spec(self):
    b, patch, c = self.config.batch_size, tuple(self.config.dataset.patch_size), self.info.channels
    target = patch[self.info.input_rank - self.info.target_rank:]
    return {"input": jax.ShapeDtypeStruct((b, *patch, c), jnp.float32),
            "target": jax.ShapeDtypeStruct((b, *target, c), jnp.float32)}

  # Evaluation.
  def predict(self, state, image: np.ndarray) -> np.ndarray:
    """The network's output for one full (*S, C) input, predicted tile by tile."""
    if self._predict is None:
      replicated = NamedSharding(self.env.mesh, P())
      self._predict = jax.jit(lambda s, x: self.model(s)(x), out_shardings=replicated)
    local = self.env.local_batch_size
    offset = jax.process_index() * local

    def apply(batch):  # a global batch of windows; this process feeds its slice
      inputs = self.env.global_batch({"input": batch[offset:offset + local]})["input"]
      return np.asarray(self._predict(state, inputs))

    cfg = self.config.eval
    rank = self.info.input_rank
    tile = tuple(cfg.tile_size) if cfg.tile_size else (1 << 30,) * rank
    overlap = tuple(cfg.tile_overlap) if cfg.tile_overlap else (0,) * rank
    tile = tuple(max(m, t - t % m) for t, m in zip(tile, self.multiple))
    overlap = tuple(-(-o // m) * m for o, m in zip(overlap, self.multiple))
    return predict_tiled(apply, image, tile=tile, overlap=overlap, multiple=self.multiple,
                         batch_size=self.config.batch_size,
                         reduce_first_axis=self.info.target_rank < rank)

  def _baseline(self, image):
    """The raw input as a guess of the target (a projection: max over Z)."""
    return image.max(axis=0) if self.info.target_rank < self.info.input_rank else image

  def _score(self, target, guess) -> dict[str, float]:
    cfg = self.config.eval
    return measures.restoration_metrics(
        target[..., 0] if target.shape[-1] == 1 else target,
        guess[..., 0] if guess.shape[-1] == 1 else guess,
        protocol=cfg.protocol, data_range=cfg.data_range,
        percentiles=tuple(cfg.percentiles))

  def eval_examples(self):
    """(input, target) pairs of the eval split: at most eval.max_examples (0: all),
    centre-cropped to eval.crop_size in the target's spatial axes when set."""
    cfg = self.config.eval
    limit, crop = cfg.max_examples, tuple(cfg.crop_size)
    if crop and len(crop) != self.info.target_rank:
      raise ValueError(f"eval.crop_size must have {self.info.target_rank} sides, got "
                       f"{crop}")
    for index, (image, target, _) in enumerate(data.eval_examples(self.config)):
      if limit and index >= limit:
        break
      if crop:
        starts = [max(0, (s - c) // 2) for s, c in zip(target.shape[:-1], crop)]
        window = tuple(slice(a, a + c) for a, c in zip(starts, crop))
        lead = (slice(None),) * (self.info.input_rank - self.info.target_rank)
        image, target = image[lead + window], target[window]
      yield image, target

  def evaluate(self, state):
    sums, count = {}, 0
    for index, (image, target) in enumerate(self.eval_examples()):
      prediction = self.predict(state, image)
      baseline = self._baseline(image)
      for prefix, guess in (("", prediction), ("input_", baseline)):
        for name, value in self._score(target, guess).items():
          sums[f"eval_{prefix}{name}"] = sums.get(f"eval_{prefix}{name}", 0.0) + value
      if index == 0:
        self._picture = (baseline, prediction, target)
      count += 1
    if not count:
      raise ValueError("the evaluation split yielded no examples")
    result = {k: v / count for k, v in sums.items()}
    result["eval_psnr_gain"] = result["eval_psnr"] - result["eval_input_psnr"]
    return result

  def image_summaries(self, state):
    """{"restoration": input | prediction | target} of the first eval image, (1, H, 3W, 3) uint8.

    3D: the middle slice (a projection's input: its max over Z). Intensities as
    the evaluation protocol sees them ("care": the target's 0.1-99.9 percentile
    range, input and prediction affinely fitted to it; "plain": 0..data_range).
    Sides above 512 are centre-cropped.
    """
    if self._picture is None:
      image, target = next(iter(self.eval_examples()))
      self._picture = (self._baseline(image), self.predict(state, image), target)
    return {"restoration": restoration_picture(*self._picture, self.config.eval)}

  def export(self, state, split, out):
    """out/<name>.tif: each image of `split` restored whole, tile by tile as the evaluation
    does, float32 (Y, X) or (Z, Y, X) (a trailing channel axis kept when there are
    several)."""
    import tifffile  # pylint: disable=g-import-not-at-top
    config = self.config.copy_and_resolve_references()
    config.dataset.eval_split = split
    written, root = 0, epath.Path(out)
    for image, _, name in data.eval_examples(config):
      prediction = np.asarray(self.predict(state, image), np.float32)
      if prediction.shape[-1] == 1:
        prediction = prediction[..., 0]
      if jax.process_index() == 0:
        buffer = io.BytesIO()
        tifffile.imwrite(buffer, prediction)
        root.mkdir(parents=True, exist_ok=True)
        (root / f"{name}.tif").write_bytes(buffer.getvalue())
      written += 1
    return f"wrote {written} restored TIFFs to {out}"


def restoration_picture(baseline, prediction, target, eval_config) -> np.ndarray:
  """input | prediction | target side by side as uint8 (1, H, 3W, 3); see image_summaries."""
  panels = [np.asarray(a, np.float64)[..., 0] for a in (baseline, prediction, target)]
  if panels[2].ndim == 3:
    panels = [p[p.shape[0] // 2] for p in panels]
  if eval_config.protocol == "care":
    t = measures.percentile_normalize(panels[2], *tuple(eval_config.get(
        "percentiles", (0.1, 99.9))))
    panels = [measures.normalize_minmse(panels[0], t), measures.normalize_minmse(panels[1], t), t]
  else:
    panels = [p / eval_config.data_range for p in panels]
  crops = []
  for p in panels:
    h, w = p.shape
    top, left = max(0, (h - MAX_PICTURE_SIDE) // 2), max(0, (w - MAX_PICTURE_SIDE) // 2)
    crops.append(p[top:top + MAX_PICTURE_SIDE, left:left + MAX_PICTURE_SIDE])
  tiles = np.concatenate(crops, axis=1)
  tiles = (np.clip(tiles, 0.0, 1.0) * 255).round().astype(np.uint8)
  return np.repeat(tiles[None, :, :, None], 3, axis=-1)


TASK = Restoration
