"""Multi-query associative recall (MQAR; Arora et al. 2023, Zoology), scored at every query.

A sequence starts with ``num_kv_pairs`` key-value pairs, then holds each key once more, as a
query, among random filler tokens; at a query the model must output the value that followed the
key. With keys ``k``, values ``v`` and filler ``.`` (``num_kv_pairs = 2``, ``seq_len = 10``):

    inputs   k1 v1 k2 v2  .  k2  .  .  k1  .
    labels   -1 -1 -1 -1 -1  v2 -1 -1  v1 -1      (target="per_step"; -1 is not scored)

As in Zoology's ``multiquery_ar``: keys come from the lower half of the vocabulary and values
from the upper half, both drawn without replacement within a sequence; queries sit at even
offsets of the query region, placed without replacement with probability proportional to
``power_a * g ** (power_a - 1)`` of their gap ``g`` (small ``power_a`` favours early queries);
other positions hold uniform random tokens. Labels are value indices (``token - first value id``),
so ``num_classes`` is the number of values. Accuracy per query position is read from the labels:
every step whose label is not -1 is a query.

Splits come from disjoint seed streams (see `tasks._util.rng`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import _generated, _util
from ._base import TaskInfo
from ._registry import TaskSpec


@dataclasses.dataclass(frozen=True)
class MQARConfig(_generated.GeneratedConfig):
    """Options of MQAR (`tasks._generated.GeneratedConfig` plus these; defaults: Zoology's
    harder setting).

    Attributes:
        seq_len: sequence length L.
        num_kv_pairs: key-value pairs (and queries) per sequence.
        vocab_size: token ids including padding 0; keys take ids 1..K, values K+1..vocab-1 with
            K = (vocab_size - 1) // 2.
        power_a: exponent of the query-gap distribution (Zoology: 0.01).
    """

    num_val: int = 3_000
    num_test: int = 3_000
    seq_len: int = 512
    num_kv_pairs: int = 64
    vocab_size: int = 8192
    power_a: float = 0.01

    task = "mqar"

    def __post_init__(self):
        super().__post_init__()
        _util.integer("mqar.seq_len", self.seq_len, low=4)
        _util.integer("mqar.num_kv_pairs", self.num_kv_pairs, low=1)
        _util.integer("mqar.vocab_size", self.vocab_size, low=5)
        _util.number("mqar.power_a", self.power_a, low=0.0, high=1.0, closed=False)
        if 4 * self.num_kv_pairs > self.seq_len:
            raise ValueError(
                f"mqar: seq_len={self.seq_len} is too short for num_kv_pairs="
                f"{self.num_kv_pairs}; it needs at least 4 * num_kv_pairs = "
                f"{4 * self.num_kv_pairs} (pairs, then a query slot of 2 per key)."
            )
        if self.num_kv_pairs > (self.vocab_size - 1) // 2 or self.num_kv_pairs > self.num_values:
            raise ValueError(
                f"mqar: vocab_size={self.vocab_size} has too few keys or values for "
                f"num_kv_pairs={self.num_kv_pairs}; use vocab_size >= {2 * self.num_kv_pairs + 1}."
            )

    @property
    def num_keys(self) -> int:
        return (self.vocab_size - 1) // 2

    @property
    def num_values(self) -> int:
        return self.vocab_size - 1 - self.num_keys


def _distinct(g: np.random.Generator, n: int, population: int, k: int) -> np.ndarray:
    """``(n, k)`` draws without replacement from ``range(population)``, one row per example."""
    return np.stack([g.choice(population, size=k, replace=False) for _ in range(n)])


def sample(cfg: MQARConfig, n: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sequences: inputs ``(n, L) int32`` and per-step labels ``(n, L) int32``."""
    N, L = cfg.num_kv_pairs, cfg.seq_len
    keys = 1 + _distinct(g, n, cfg.num_keys, N)
    value_idx = _distinct(g, n, cfg.num_values, N)
    values = 1 + cfg.num_keys + value_idx
    context = 2 * N
    inputs = g.integers(1, cfg.vocab_size, size=(n, L))  # filler
    inputs[:, 0:context:2] = keys
    inputs[:, 1:context:2] = values
    # Query slots are the even offsets of the region after the pairs; slot s has gap s + 1.
    slots = (L - context) // 2
    gaps = np.arange(1, slots + 1, dtype=np.float64)
    log_p = np.log(cfg.power_a) + (cfg.power_a - 1.0) * np.log(gaps)
    # Gumbel top-k: the N largest of log p + Gumbel noise are a draw without replacement with
    # probabilities proportional to p (the same law as successive np.random.choice draws).
    scores = log_p + g.gumbel(size=(n, slots))
    chosen = np.argpartition(-scores, N - 1, axis=1)[:, :N]
    positions = context + 2 * chosen
    labels = np.full((n, L), -1, dtype=np.int64)
    np.put_along_axis(inputs, positions, keys, axis=1)
    np.put_along_axis(labels, positions, value_idx, axis=1)
    return inputs.astype(np.int32), labels.astype(np.int32)


def make(cfg: MQARConfig) -> dict[str, np.ndarray]:
    return _generated.fixed_length(cfg, sample, cfg.seq_len)


def info(cfg: MQARConfig, arrays=None) -> TaskInfo:
    return TaskInfo(
        name="mqar",
        description=DESCRIPTION,
        seq_len=cfg.seq_len,
        variable_length=False,
        input_kind="tokens",
        vocab_size=cfg.vocab_size,
        num_classes=cfg.num_values,
        target="per_step",
    )


DESCRIPTION = (
    "MQAR (Zoology): key-value pairs, then each key again as a query; predict its value at "
    "every query (per-step labels)."
)

TASKS = {
    "mqar": TaskSpec(
        name="mqar",
        description=DESCRIPTION,
        label="MQAR",
        config_cls=MQARConfig,
        make=make,
        info=info,
        presets={
            "smoke": dict(num_train=256, num_val=64, num_test=64, seq_len=32, num_kv_pairs=4,
                          vocab_size=64),
            "cpu": dict(num_train=5000, num_val=500, num_test=500, seq_len=128,
                        num_kv_pairs=16, vocab_size=256),
            "gpu": dict(num_train=100_000, num_val=3_000, num_test=3_000, seq_len=512,
                        num_kv_pairs=64, vocab_size=8192),
        },
    )
}
