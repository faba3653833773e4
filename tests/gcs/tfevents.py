"""TensorBoard event files read from their bytes (as the emulator holds them), without a
storage client: TFRecord framing, then tf.Event protos."""

import tensorflow as tf


def records(data: bytes) -> list[bytes]:
  """The records of a TFRecord file: [length u64][crc u32][data][crc u32] each."""
  out, offset = [], 0
  while offset < len(data):
    length = int.from_bytes(data[offset:offset + 8], "little")
    out.append(data[offset + 12:offset + 12 + length])
    offset += 12 + length + 4
  return out


def scalars(files: list[bytes]) -> dict[str, list[tuple[int, float]]]:
  """Every (step, value) point of every scalar tag in the event files, in file order."""
  points = {}
  for data in files:
    for record in records(data):
      event = tf.compat.v1.Event.FromString(record)
      for value in event.summary.value:
        if value.HasField("tensor") and not value.tensor.string_val:
          points.setdefault(value.tag, []).append(
              (event.step, float(tf.make_ndarray(value.tensor))))
  return points
