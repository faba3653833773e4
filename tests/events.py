"""Reads a workdir's TensorBoard event files back (tests only; the run never does)."""

import glob
import os


def written_points(workdir: str) -> dict[str, dict[int, float | None]]:
  """Every point in `workdir`'s event files: tag -> step -> value (None for an image)."""
  from tensorboard.backend.event_processing import event_file_loader  # pylint: disable=g-import-not-at-top
  from tensorboard.util import tensor_util  # pylint: disable=g-import-not-at-top
  points = {}
  for path in sorted(glob.glob(os.path.join(workdir, "events.out.tfevents.*"))):
    for event in event_file_loader.RawEventFileLoader(path).Load():
      from tensorboard.compat.proto import event_pb2  # pylint: disable=g-import-not-at-top
      event = event_pb2.Event.FromString(event)
      for value in event.summary.value:
        scalar = value.HasField("tensor") and not value.tensor.string_val
        points.setdefault(value.tag, {})[event.step] = (
            float(tensor_util.make_ndarray(value.tensor)) if scalar else None)
  return points
