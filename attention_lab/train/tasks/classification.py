"""Image classification: softmax cross-entropy with label smoothing; top-1 / top-5.

State: {"step", "params", "non_params", "opt_state"} of one model (base.TrainableModel).
Data: data/pipeline.py (digits, CIFAR, ImageNet).
"""

import flax
import jax
import jax.numpy as jnp
import optax
from clu import metrics

from attention_lab.data import pipeline
from attention_lab.data.info import data_info
from attention_lab.train import optim
from attention_lab.train.tasks import base


@flax.struct.dataclass
class ClassificationMetrics(metrics.Collection):
  loss: metrics.Average.from_output("loss")
  top1: metrics.Average.from_output("top1")
  top5: metrics.Average.from_output("top5")


class Classification(base.Task):
  """One classifier, one optimizer; whole-set top-1 / top-5 on the eval split."""

  headline = "top1"

  def __init__(self, config, env):
    super().__init__(config, env)
    info = data_info(config)
    self.num_classes = info.num_classes
    channels = config.dataset.channels or info.channels  # e.g. grey digits as RGB
    self.image_shape = (config.dataset.image_size, config.dataset.image_size, channels)
    self.label_smoothing = config.label_smoothing
    self.set_schedule(info.num_examples(config.dataset.train_split))
    self.net = base.TrainableModel(
        lambda rngs: base.create_model(config.model, num_classes=self.num_classes, rngs=rngs),
        optim.make_optimizer(config.optimizer, self.schedule), config.seed,
        config.bn_group_size)

  def init_state(self):
    return {"step": jnp.zeros((), jnp.int32), **self.net.init()}

  def model(self, state):
    """The trained classifier in evaluation mode (e.g. to draw attention maps)."""
    return self.net.model(state, train=False)

  def loss_and_metrics(self, logits, batch):
    labels = jax.nn.one_hot(batch["label"], self.num_classes)
    if self.label_smoothing:
      labels = optax.smooth_labels(labels, self.label_smoothing)
    per_example = optax.softmax_cross_entropy(logits.astype(jnp.float32), labels)
    mask = batch.get("mask", jnp.ones_like(per_example, bool))
    top5 = jax.lax.top_k(logits, min(5, self.num_classes))[1]
    values = ClassificationMetrics.single_from_model_output(
        loss=per_example, top1=jnp.argmax(logits, -1) == batch["label"],
        top5=jnp.any(top5 == batch["label"][:, None], axis=-1), mask=mask)
    return base.masked_mean(per_example, mask), values

  def train_step(self, state, batch):
    grads, (non_params, values) = self.net.gradients(
        state, batch, lambda model, b: self.loss_and_metrics(model(b["image"]), b),
        self.config.microbatches)
    return {"step": state["step"] + 1, **self.net.update(state, grads, non_params)}, values

  def eval_step(self, state, batch):
    return self.loss_and_metrics(self.model(state)(batch["image"]), batch)[1]

  def train_batches(self, start_step):
    return pipeline.train_iterator(
        self.config, local_batch_size=self.env.local_batch_size, start_step=start_step)

  def evaluate(self, state):
    batches = pipeline.eval_batches(self.config, local_batch_size=self.env.local_batch_size)
    total = self.evaluate_batches(state, self.eval_step, batches)
    return {f"eval_{k}": float(v) for k, v in total.compute().items()}

  def batch_spec(self):
    return {"image": jax.ShapeDtypeStruct((self.config.batch_size, *self.image_shape),
                                          jnp.float32),
            "label": jax.ShapeDtypeStruct((self.config.batch_size,), jnp.int32)}


TASK = Classification
