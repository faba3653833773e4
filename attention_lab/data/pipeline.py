"""The one input recipe, on Grain over random-access records: resumable training batches,
padded evaluation batches; and the classification pipeline.

Every task module (classification here, segmentation, detection, restoration, gan)
builds its train stream with `resumable_batches` and its evaluation batches with
`padded_batches`, passing its own per-example transforms (numpy, data/transforms.py) and
the records of a split (data/sources.py: any sequence of examples works).

The train stream is a pure function of (config seed, step), whatever the process count:
- position g = S·B + j of the endless stream (step S, row j of the global batch of B
  rows) reads example perm_e(g mod N) of the split's N, e = g div N: a fresh global
  permutation of the indices every epoch (`EpochShuffle`, no buffer);
- the augmentation draws from a generator seeded by (seed, g) (grain's random map);
- process p of P takes rows [p·B/P, (p+1)·B/P) of every global batch, the rows
  `jax.make_array_from_process_local_data` puts on its devices, so two processes feed
  what one process with both their devices feeds;
- resuming at step S starts the same dataset at S: O(1), nothing skipped or decoded.
A run's global batch size is part of its recorded config (train/workdir.py): resuming
with another is refused; another process count reads the same global batches.

Workers (`dataset.workers`, 0: this process) decode in separate processes (grain's
mp_prefetch); each batch is assembled in one worker, so the batches do not depend on
the worker count.
"""

from __future__ import annotations

import collections.abc
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence

import grain
import numpy as np
from absl import flags

from attention_lab.data import info, sources
from attention_lab.data.transforms import classification
from attention_lab.data.transforms import image as image_ops

Batch = dict[str, np.ndarray]
# Positions of an endless stream: below sys.maxsize, which grain's batch lengths
# (ceil of a float quotient) can round past.
ENDLESS = 2**62
# Batches each process (or worker) builds ahead, and the threads building them.
PREFETCH_BATCHES = 4
THREADS = 2


def _seed(seed: int, stream: int) -> int:
  """A 32-bit seed for one random stream (shuffle, augmentation) of the run's seed."""
  return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


class EpochShuffle(grain.MapDataset):
  """Position g → parent[perm_e(g mod N)], e = g div N: endless epochs over the N examples
  of `parent`, each in a fresh permutation drawn from (seed, e). A permutation costs O(N)
  time and memory once per epoch (the two in use are kept); grain's own per-position index
  shuffle is O(1) in memory but slow on small datasets (its cost grows as N shrinks)."""

  _MUTATES_ELEMENT_SPEC = False

  def __init__(self, parent: grain.MapDataset, seed: int):
    super().__init__(parent)
    self._seed, self._size, self._permutations = seed, len(parent), {}

  def __len__(self) -> int:
    return ENDLESS

  def __str__(self) -> str:
    return f"EpochShuffle(seed={self._seed})"

  def _permutation(self, epoch: int) -> np.ndarray:
    permutation = self._permutations.get(epoch)
    if permutation is None:
      permutation = np.random.default_rng([self._seed, epoch]).permutation(self._size)
      self._permutations = {e: p for e, p in self._permutations.items() if e == epoch - 1}
      self._permutations[epoch] = permutation
    return permutation

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    epoch, position = divmod(int(index), self._size)
    return self._parent[int(self._permutation(epoch)[position])]


def _ignore_signals(*_):
  """Worker processes leave SIGTERM and SIGINT to the main process, which stops them."""
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  signal.signal(signal.SIGINT, signal.SIG_IGN)


def iterate(ds: grain.MapDataset, workers: int = 0) -> Iterator:
  """The elements of `ds` in order, built by THREADS threads of this process, or by
  `workers` processes."""
  stream = ds.to_iter_dataset(grain.ReadOptions(num_threads=THREADS,
                                                prefetch_buffer_size=PREFETCH_BATCHES))
  if workers > 0:
    if not flags.FLAGS.is_parsed():  # grain reads a flag of its own; outside an absl app
      flags.FLAGS.mark_as_parsed()  # (tests, notebooks) every flag keeps its default
    stream = stream.mp_prefetch(
        grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2),
        worker_init_fn=_ignore_signals)
  return iter(stream)


def _process():
  import jax  # pylint: disable=g-import-not-at-top  (where a stream is built, not at import)
  return jax.process_index(), jax.process_count()


def resumable_batches(records: Sequence, augment: Callable, *, seed: int,
                      batch_shape: tuple[int, ...], start_step: int = 0, workers: int = 0,
                      batch_map: Callable | None = None) -> Iterator[Batch]:
  """Endless numpy batches of `augment(example, rng)` over `records`, from `start_step`.

  `batch_shape` is this process's part of one step: (b,), or (b, K) for rows of K
  consecutive examples (the GAN's K discriminator updates); the global batch has P·b
  rows. `augment` returns a dict of fixed-shape arrays; `rng` (np.random.Generator) is a
  pure function of (seed, stream position). `batch_map` then maps each stacked batch
  (e.g. to float and normalised: one numpy op per batch, not per example).
  """
  process, count = _process()
  ds = EpochShuffle(grain.MapDataset.source(records), _seed(seed, 0))
  ds = ds.random_map(augment, seed=_seed(seed, 1))
  for size in reversed(batch_shape):
    ds = ds.batch(size)
  ds = ds[process::count][start_step:]
  if batch_map is not None:
    ds = ds.map(batch_map)
  return iterate(ds, workers)


class Indexed(collections.abc.Sequence):
  """`records` with each example's index added as "index" (int64)."""

  def __init__(self, records: Sequence):
    self.records = records

  def __len__(self) -> int:
    return len(self.records)

  def __getitem__(self, index):
    return {**self.records[index], "index": np.int64(index)}


def padded_batches(records: Sequence, preprocess: Callable, *, batch_size: int,
                   limit: int | None = None, pad_values: Mapping[str, int] | None = None,
                   batch_map: Callable | None = None, workers: int = 0) -> Iterator[Batch]:
  """One pass over this process's share of `records` (of the first `limit`) mapped by
  `preprocess`, in numpy batches of exactly `batch_size` with a bool "mask" of the real
  examples; padded rows hold 0 (or pad_values[key]).

  Process p of P reads the contiguous examples [p·s, (p+1)·s), s = ⌈n/P⌉, and every
  process yields ⌈s / batch_size⌉ batches (all-padding ones where its share is short),
  as collectives over the processes need."""
  process, count = _process()
  n = len(records) if limit is None else min(limit, len(records))
  share = -(-n // count)
  start, stop = min(process * share, n), min((process + 1) * share, n)
  num_batches = -(-share // batch_size)
  if not n:
    return iter(())
  rows = np.full(num_batches * batch_size, start if stop > start else 0)
  rows[:stop - start] = np.arange(start, stop)
  valid = np.arange(len(rows)) < stop - start
  pads = dict(pad_values or {})

  def pad(batch):
    mask = batch.pop("valid")
    batch = batch_map(batch) if batch_map else batch
    for key, value in batch.items():
      value[~mask] = pads.get(key, 0)
    return {**batch, "mask": mask}

  ds = grain.MapDataset.source(list(zip(rows.tolist(), valid.tolist())))
  ds = ds.map(lambda item: {**preprocess(records[item[0]]), "valid": np.bool_(item[1])})
  return iterate(ds.batch(batch_size).map(pad), workers)


def in_order(records: Sequence, preprocess: Callable, *, batch_size: int,
             limit: int | None = None, batch_map: Callable | None = None,
             workers: int = 0) -> Iterator[Batch]:
  """The first `limit` of `records` (all: None) mapped by `preprocess`, in order, in numpy
  batches of `batch_size` (the last one smaller), the same on every process."""
  ds = grain.MapDataset.source(records)
  if limit is not None:
    ds = ds[:limit]
  ds = ds.map(preprocess).batch(batch_size)
  return iterate(ds if batch_map is None else ds.map(batch_map), workers)


# Classification ------------------------------------------------------------------------------

def normalization(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """(mean, std) per channel, of pixels in [0, 1], that `name`'s classification images are
  normalised with (what a model trained on them expects)."""
  return info.lookup(name, "classification").stats


def _options(config) -> dict:
  """The keyword arguments of transforms.classification for `config`."""
  d = config.dataset
  mean, std = normalization(d.name)
  return dict(dataset=d.name, size=d.image_size, mean=mean, std=std,
              channels=d.channels or None, normalize=False)


def _normalizer(config) -> Callable[[Batch], Batch]:
  """The per-batch normalisation (pixel/255 − mean)/std of the classification images."""
  mean, std = normalization(config.dataset.name)
  return lambda batch: {**batch, "image": image_ops.normalize(batch["image"], mean, std)}


def _records(config, split: str):
  info.lookup(config.dataset.name, "classification")
  return sources.records(config.dataset, split)


def train_iterator(config, *, local_batch_size: int, start_step: int = 0):
  """Endless iterator of numpy batches for this process, positioned at `start_step`."""
  d, options = config.dataset, _options(config)
  augment = lambda ex, rng: classification.train(ex["image"], ex["label"], rng, crop=d.crop,
                                                 **options)
  return resumable_batches(_records(config, d.train_split), augment, seed=config.seed,
                           batch_shape=(local_batch_size,), start_step=start_step,
                           workers=d.workers, batch_map=_normalizer(config))


def eval_batches(config, *, local_batch_size: int):
  """One pass over this process's share of the eval split, padded to full batches with a
  'mask'."""
  d, options = config.dataset, _options(config)
  preprocess = lambda ex: classification.evaluate(ex["image"], ex["label"], **options)
  return padded_batches(_records(config, d.eval_split), preprocess,
                        batch_size=local_batch_size, batch_map=_normalizer(config),
                        workers=d.workers)
