"""Training: optimizers and schedules from config, the generic trainer."""
