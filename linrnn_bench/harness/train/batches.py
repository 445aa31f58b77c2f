"""Training and evaluation batches: the examples of a step (`BatchSampler`, deterministic in
(seed, epoch)) and the length buckets a batch is cut to."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from linrnn_bench.tasks import Split


class Batch(NamedTuple):
    """A batch of examples as device arrays (shapes as `tasks.Split`, with n = batch size)."""

    inputs: jax.Array
    labels: jax.Array
    lengths: jax.Array


def to_batch(split: Split, index: np.ndarray, length: int | None = None, *,
             device: bool = True) -> Batch:
    """The examples ``index`` of ``split`` as a `Batch`, cut to ``length`` steps.

    ``length`` must be at least the longest example of ``index`` (`trimmed_length`), so only
    padding steps are dropped; None keeps the split's length. ``device=False`` keeps the
    arrays on the host, for a jitted function that transfers its arguments itself.
    """
    inputs, labels, lengths = split.inputs[index], split.labels[index], split.lengths[index]
    if length is not None:
        time = lengths.ndim  # inputs: (n, L[, d]), or (n, 2, L[, d]) for a pair task
        inputs = inputs[(slice(None),) * time + (slice(0, length),)]
        if labels.ndim == 2:  # per-step labels (n, L)
            labels = labels[:, :length]
    if not device:
        return Batch(inputs, labels, lengths)
    return Batch(*jax.device_put((inputs, labels, lengths)))


# The fewest tokens between two bucket lengths. Each bucket is one more compiled training step
# and evaluation (seconds each on a CPU), and a shorter bucket saves at most the tokens it
# drops on the steps that use it (microseconds per token at the cpu presets' widths): at the
# cpu presets' lengths (ListOps 37 tokens, 400 steps) one bucket is faster than four, while a
# long task trained for many steps (LRA ListOps, 2000 tokens) keeps all four.
BUCKET_SPACING = 64


def bucket_lengths(seq_len: int, buckets: int = 4, spacing: int | None = None) -> tuple[int, ...]:
    """The lengths a batch is cut to: ``seq_len`` times k / n for k = 1..n, rounded up to a
    multiple of 8 (at most ``seq_len``), where n is ``buckets`` or fewer, at most
    ``seq_len // spacing`` (`BUCKET_SPACING` by default), so that buckets lie about ``spacing``
    tokens apart or more (the rounding can take up to 7 off a gap); one bucket, ``seq_len``
    itself, for a task shorter than twice ``spacing``. A task compiles at most n shapes."""
    spacing = BUCKET_SPACING if spacing is None else spacing
    buckets = max(1, min(buckets, seq_len // spacing))

    def up_to_8(n: int) -> int:
        return -(-n // 8) * 8

    return tuple(sorted({min(seq_len, up_to_8(-(-seq_len * k // buckets)))
                         for k in range(1, buckets + 1)}))


def trimmed_length(lengths: np.ndarray, buckets: tuple[int, ...]) -> int:
    """The shortest of ``buckets`` that holds the longest of ``lengths`` (every bucket is the
    task's full length when none does, e.g. an empty batch)."""
    longest = int(np.max(lengths, initial=0))
    return next((b for b in buckets if b >= longest), buckets[-1])


def split_length(split: Split) -> int:
    """The padded length of ``split``'s sequences."""
    return int(split.inputs.shape[split.lengths.ndim])


class BatchSampler:
    """Training batches without replacement; epoch e's order depends only on (seed, e).

    Each batch is cut to the bucket (`bucket_lengths`) that holds its longest example
    (``trim=False``: the split's length): the same examples, the same loss up to float
    round-off, without the steps that are padding in every example of the batch.
    """

    def __init__(self, split: Split, batch_size: int, seed: int, *, trim: bool = True,
                 device: bool = True):
        n = len(split)
        if n < batch_size:
            raise ValueError(
                f"The training split has {n} examples, fewer than batch_size={batch_size}; "
                "lower train.batch_size or enlarge the task."
            )
        self.split, self.batch_size, self.seed = split, batch_size, seed
        self.per_epoch = n // batch_size
        self.buckets = bucket_lengths(split_length(split)) if trim else None
        self.device = device  # False: host arrays (`to_batch`)
        self._epoch, self._order = -1, np.arange(0)

    def __call__(self, step: int, length: int | None = None) -> Batch:
        """The batch of step ``step`` (0-based), cut to its bucket, or to ``length`` (at least
        its bucket: a seed group cuts every seed's batch to the longest of their buckets)."""
        index = self.indices(step)
        if length is None:
            length = self.length(index)
        return to_batch(self.split, index, length, device=self.device)

    def indices(self, step: int) -> np.ndarray:
        """The examples of step ``step``'s batch."""
        epoch, i = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            # A seed sequence of (seed, epoch): epochs are independent streams, so resuming at
            # any step reconstructs the same order without replaying earlier epochs.
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, epoch]))
            self._epoch, self._order = epoch, rng.permutation(len(self.split))
        return self._order[i * self.batch_size : (i + 1) * self.batch_size]

    def length(self, index: np.ndarray) -> int | None:
        """The bucket the examples ``index`` are cut to (None: not cut, ``trim=False``)."""
        if self.buckets is None:
            return None
        return trimmed_length(self.split.lengths[index], self.buckets)

