"""TensorBoard writing for the loop (process 0 only), once per (tag, step) across
resumes: a killed run may have written points after its last checkpoint, and the resumed
run, which repeats those steps with the same values, skips them."""

import glob
import os

import jax
from clu import metric_writers


def written_points(workdir: str) -> dict[str, dict[int, float | None]]:
  """Every TensorBoard point already in `workdir` (from an earlier or a killed run): tag ->
  step -> value (None for an image)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  points = {}
  for path in glob.glob(os.path.join(workdir, "events.out.tfevents.*")):
    try:
      for record in tf.data.TFRecordDataset(path):
        event = tf.compat.v1.Event.FromString(record.numpy())
        for value in event.summary.value:
          scalar = value.HasField("tensor") and not value.tensor.string_val
          points.setdefault(value.tag, {})[event.step] = (
              float(tf.make_ndarray(value.tensor)) if scalar else None)
    except tf.errors.DataLossError:  # the killed run's last record was cut short
      pass
  return points


class OncePerStep:
  """A clu writer that skips the (tag, step) points at or before `written[tag]` (the last
  step of each tag that the workdir's event files hold)."""

  def __init__(self, writer, written: dict[str, int]):
    self.writer, self.written = writer, written

  def _new(self, step, values):
    return {k: v for k, v in values.items() if step > self.written.get(k, -1)}

  def write_scalars(self, step, scalars):
    if scalars := self._new(step, scalars):
      self.writer.write_scalars(step, scalars)

  def write_images(self, step, images):
    if images := self._new(step, images):
      self.writer.write_images(step, images)

  def flush(self):
    self.writer.flush()

  def close(self):
    self.writer.close()


def create(workdir: str, points: dict[str, dict[int, float | None]]):
  """Process 0's writer to `workdir`, skipping every tag's steps up to the last one in
  `points` (`written_points`); a writer that writes nothing on the other processes."""
  if jax.process_index() > 0:
    return metric_writers.MultiWriter([])
  writer = metric_writers.create_default_writer(workdir, just_logging=False,
                                                asynchronous=False)
  return OncePerStep(writer, {tag: max(steps) for tag, steps in points.items()})
