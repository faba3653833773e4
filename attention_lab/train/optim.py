"""optax optimizers and the learning-rate schedules the papers used, selected by config.

config.optimizer fields: name ("sgd" | "adamw" | "rmsprop" | "adam"), learning_rate (peak),
momentum, nesterov, weight_decay, grad_clip_norm, b1 / b2 (adam; SAGAN's TTUR: 0, 0.9),
schedule and its fields:
- "constant";
- "step": ×decay_factor at each of decay_epochs, after warmup_epochs of linear
  warmup (SANet/KANet: SGD 0.9, 0.1 ×0.1 at 80/105/120 of 150 epochs; AA
  ResNets: warmup then ×0.1 at 30/60/80/90);
- "cosine": linear warmup then cosine decay to 0 (AA CIFAR-100 WRN);
- "exponential": ×decay_factor every decay_every_epochs, staircase (MnasNet
  RMSProp);
- "poly": (1 − t/T)^power (segmentation).
"""

import jax
import optax

SCHEDULES = ("constant", "step", "cosine", "exponential", "poly")
OPTIMIZERS = ("sgd", "adamw", "rmsprop", "adam")


def make_schedule(cfg, *, steps_per_epoch: int, total_steps: int) -> optax.Schedule:
  lr = cfg.learning_rate
  warmup = int(cfg.get("warmup_epochs", 0) * steps_per_epoch)
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
    main = optax.polynomial_schedule(lr, 0.0, cfg.get("power", 0.9), max(1, total_steps - warmup))
  if not warmup:
    return main
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), main], [warmup])


def make_optimizer(cfg, schedule: optax.Schedule) -> optax.GradientTransformation:
  if cfg.name not in OPTIMIZERS:
    raise ValueError(f"optimizer.name must be one of {OPTIMIZERS}, got {cfg.name!r}")
  chain = []
  if cfg.get("grad_clip_norm"):
    chain.append(optax.clip_by_global_norm(cfg.grad_clip_norm))
  if cfg.name == "sgd":
    if cfg.get("weight_decay"):
      chain.append(optax.add_decayed_weights(cfg.weight_decay, mask=_kernel_mask))
    chain.append(optax.sgd(schedule, momentum=cfg.get("momentum") or None,
                           nesterov=cfg.get("nesterov", False)))
  elif cfg.name == "adam":  # plain Adam (no decay), e.g. the GAN's G and D
    chain.append(optax.adam(schedule, b1=cfg.get("b1", 0.9), b2=cfg.get("b2", 0.999),
                            eps=cfg.get("eps", 1e-8)))
  elif cfg.name == "adamw":
    chain.append(optax.adamw(schedule, weight_decay=cfg.get("weight_decay", 0.0),
                             mask=_kernel_mask))
  else:
    if cfg.get("weight_decay"):
      chain.append(optax.add_decayed_weights(cfg.weight_decay, mask=_kernel_mask))
    chain.append(optax.rmsprop(schedule, decay=0.9, eps=1e-3, momentum=cfg.get("momentum", 0.9)))
  return optax.chain(*chain)


def _kernel_mask(params):
  """Weight decay on kernels only, not on biases, norm scales or other 1-D params."""
  return jax.tree.map(lambda p: p.ndim > 1, params)
