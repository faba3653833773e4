"""TensorBoard writing for the loop (process 0 only), without TensorFlow: tensorboard's own
event-file writer and summary protos, PNG pictures encoded by Pillow. Each (tag, step) is
written once across resumes: a killed run may have written points after its last
checkpoint, and the resumed run, which repeats those steps with the same values, skips
them (the run summary, run_summary.RunSummary, remembers what was written)."""

import contextlib
import io

import jax
import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.scalar import summary_v2 as scalar_summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from attention_lab.train import errors, run_summary, workdir as workdir_lib


def _png(image: np.ndarray) -> summary_pb2.Summary.Image:
  from PIL import Image  # pylint: disable=g-import-not-at-top
  image = np.asarray(image)
  buffer = io.BytesIO()
  Image.fromarray(image.squeeze(-1) if image.shape[-1] == 1 else image).save(buffer, "PNG")
  return summary_pb2.Summary.Image(height=image.shape[0], width=image.shape[1],
                                   colorspace=image.shape[-1],
                                   encoded_image_string=buffer.getvalue())


class Writer:
  """Scalars and images to `<workdir>/events.out.tfevents.*` (process 0; the others write
  nothing), each point at most once per step across resumes (`summary.written`)."""

  def __init__(self, workdir: str, summary: run_summary.RunSummary, latest_step=lambda: None):
    self.summary, self.workdir, self.latest_step = summary, workdir, latest_step
    self.events = (EventFileWriter(str(workdir_lib.resolve(workdir)))
                   if jax.process_index() == 0 else None)

  @contextlib.contextmanager
  def _storage(self):
    """A failure of the storage (full, gone, refused) as one `errors.WriteError` line."""
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except
      raise errors.WriteError(
          f"writing the TensorBoard events and run summary in {self.workdir} failed: "
          f"{errors.reason(e)}{errors.what_to_do(e, self.latest_step())}") from e

  def _write(self, step: int, points: dict, values) -> None:
    """`values(tag, point)` -> Summary.Values of each of `points` not written yet."""
    new = {tag: x for tag, x in points.items() if self.summary.is_new(tag, step)}
    if self.events is not None and new:
      protos = [v for tag, x in new.items() for v in values(tag, x)]
      self.events.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=protos)))
      self.summary.wrote(step, new)

  def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
    self._write(step, scalars, lambda tag, x: scalar_summary.scalar_pb(tag, float(x)).value)

  def write_images(self, step: int, images: dict[str, np.ndarray]) -> None:
    """Each (N, H, W, C) uint8 batch as N images `tag/0`, `tag/1`, ... of one step."""
    self._write(step, images, lambda tag, batch: [
        summary_pb2.Summary.Value(tag=f"{tag}/{i}" if len(batch) > 1 else tag, image=_png(x))
        for i, x in enumerate(np.asarray(batch))])

  def flush(self) -> None:
    if self.events is not None:
      with self._storage():
        self.events.flush()
        self.summary.save()

  def close(self) -> None:
    if self.events is not None:
      with self._storage():
        self.events.close()
        self.summary.save()
