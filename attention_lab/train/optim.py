"""optax optimizers and the learning-rate schedules the papers used, selected by config.

config.optimizer fields: name ("sgd" | "adam" | "adamw" | "rmsprop"), learning_rate (peak),
b1, b2, eps (Adam; default 0.9, 0.999, 1e-8 — CARE trains with Keras Adam at these;
SAGAN's TTUR uses b1 0, b2 0.9),
momentum, nesterov, weight_decay, grad_clip_norm, schedule and its fields:
- "constant";
- "step": ×decay_factor at each of decay_epochs, after warmup_epochs of linear
  warmup (SANet/KANet: SGD 0.9, 0.1 ×0.1 at 80/105/120 of 150 epochs; AA
  ResNets: warmup then ×0.1 at 30/60/80/90);
- "cosine": linear warmup then cosine decay to 0 (AA CIFAR-100 WRN);
- "exponential": ×decay_factor every decay_every_epochs, staircase (MnasNet
  RMSProp);
- "poly": (1 − t/T)^power (segmentation).

mu_dtype ("" | "float32" | "bfloat16"): the dtype of the first moment (SGD and RMSProp
momentum, Adam's m; optax's `mu_dtype` / `accumulator_dtype`), "" keeping the parameters'
dtype. "bfloat16" halves that state's memory, as big_vision and MaxText offer for paper
batches on small hardware; the second moment stays float32. SGD without momentum has no
first moment.

Segmentation recipes (DeepLabV2, HamNet) set two more fields (configs/schema.py gives
every field its default):
- decay_params: "kernels" (default: every parameter of rank ≥ 2, i.e. conv and
  dense kernels, not biases or norm scales) or "conv_kernels" (rank-4 conv
  kernels only, as the Ham reference's weight decay "on conv weights only");
- head_lr_multiplier (default 1): the learning rate of every parameter outside
  the top-level module `backbone_name` ("backbone") is multiplied by it
  (DeepLabV2: classifier ×10), as a final masked optax.scale (SGD, RMSProp and
  Adam updates are linear in the learning rate, so this equals a separate
  learning rate per parameter group, weight decay included as in PyTorch).
"""

import jax
import jax.numpy as jnp
import optax

SCHEDULES = ("constant", "step", "cosine", "exponential", "poly")
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")
MU_DTYPES = {"": None, "float32": jnp.float32, "bfloat16": jnp.bfloat16}


def make_schedule(cfg, *, steps_per_epoch: int, total_steps: int) -> optax.Schedule:
  lr = cfg.learning_rate
  warmup = int(cfg.warmup_epochs * steps_per_epoch)
  if cfg.schedule not in SCHEDULES:
    raise ValueError(f"optimizer.schedule must be one of {SCHEDULES}, got {cfg.schedule!r}")
  if cfg.schedule == "constant":
    main = optax.constant_schedule(lr)
  elif cfg.schedule == "step":
    boundaries = {int(e * steps_per_epoch) - warmup: cfg.decay_factor for e in cfg.decay_epochs}
    main = optax.piecewise_constant_schedule(lr, boundaries)
  elif cfg.schedule == "cosine":
    main = optax.cosine_decay_schedule(lr, max(1, total_steps - warmup))
  elif cfg.schedule == "exponential":
    main = optax.exponential_decay(
        lr, int(cfg.decay_every_epochs * steps_per_epoch), cfg.decay_factor, staircase=True)
  else:
    main = optax.polynomial_schedule(lr, 0.0, cfg.power, max(1, total_steps - warmup))
  if not warmup:
    return main
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), main], [warmup])


def make_optimizer(cfg, schedule: optax.Schedule) -> optax.GradientTransformation:
  if cfg.name not in OPTIMIZERS:
    raise ValueError(f"optimizer.name must be one of {OPTIMIZERS}, got {cfg.name!r}")
  mu_dtype = cfg.mu_dtype
  if mu_dtype not in MU_DTYPES:
    raise ValueError(f"optimizer.mu_dtype must be one of {tuple(MU_DTYPES)}, got {mu_dtype!r}")
  mu_dtype = MU_DTYPES[mu_dtype]
  chain = []
  if cfg.grad_clip_norm:
    chain.append(optax.clip_by_global_norm(cfg.grad_clip_norm))
  decay_mask = _decay_mask(cfg.decay_params)
  if cfg.name == "sgd":
    if cfg.weight_decay:
      chain.append(optax.add_decayed_weights(cfg.weight_decay, mask=decay_mask))
    chain.append(optax.sgd(schedule, momentum=cfg.momentum or None,
                           nesterov=cfg.nesterov, accumulator_dtype=mu_dtype))
  elif cfg.name == "adam":
    if cfg.weight_decay:
      chain.append(optax.add_decayed_weights(cfg.weight_decay, mask=decay_mask))
    chain.append(optax.adam(schedule, b1=cfg.b1, b2=cfg.b2,
                            eps=cfg.eps, mu_dtype=mu_dtype))
  elif cfg.name == "adamw":
    chain.append(optax.adamw(schedule, weight_decay=cfg.weight_decay,
                             mask=decay_mask, mu_dtype=mu_dtype))
  else:
    if cfg.weight_decay:
      chain.append(optax.add_decayed_weights(cfg.weight_decay, mask=decay_mask))
    chain.append(_rmsprop(schedule, cfg.momentum, mu_dtype))
  multiplier = cfg.head_lr_multiplier
  if multiplier != 1.0:
    chain.append(optax.masked(optax.scale(multiplier),
                              head_mask(cfg.backbone_name)))
  return optax.chain(*chain)


def _rmsprop(schedule, momentum, mu_dtype) -> optax.GradientTransformation:
  """optax.rmsprop(schedule, decay=0.9, eps=1e-3, momentum=momentum), the same chain and state,
  with the momentum trace in `mu_dtype` (optax.rmsprop has no accumulator dtype)."""
  return optax.chain(
      optax.scale_by_rms(decay=0.9, eps=1e-3),
      optax.scale_by_learning_rate(schedule),
      optax.identity() if momentum is None else optax.trace(momentum,
                                                            accumulator_dtype=mu_dtype))


DECAY_PARAMS = ("kernels", "conv_kernels")


def _decay_mask(which: str):
  if which not in DECAY_PARAMS:
    raise ValueError(f"optimizer.decay_params must be one of {DECAY_PARAMS}, got {which!r}")
  return _kernel_mask if which == "kernels" else _conv_kernel_mask


def _conv_kernel_mask(params):
  """Weight decay on 2D convolution kernels (rank 4) only."""
  return jax.tree.map(lambda p: p.ndim == 4, params)


def _key_name(entry) -> str:
  for attribute in ("key", "name", "idx"):
    if hasattr(entry, attribute):
      return str(getattr(entry, attribute))
  return str(entry)


def head_mask(backbone_name: str = "backbone"):
  """Mask function: True for parameters whose top-level module is not `backbone_name`."""
  def mask(params):
    return jax.tree_util.tree_map_with_path(
        lambda path, _: not path or _key_name(path[0]) != backbone_name, params)
  return mask


def _kernel_mask(params):
  """Weight decay on kernels only, not on biases, norm scales or other 1-D params."""
  return jax.tree.map(lambda p: p.ndim > 1, params)
