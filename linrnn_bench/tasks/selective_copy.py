"""Selective copying (Gu & Dao 2023, Mamba; after the copying task of Arjovsky et al. 2016).

``num_tokens`` data tokens sit at random positions among ``gap_length`` blank tokens; then
``num_tokens`` copy markers ask for the data tokens in their order of appearance, one per marker.
With blank ``_``, marker ``?`` and ``num_tokens = 3``, ``gap_length = 4``:

    inputs   _ a _ _ c b _ ? ? ?
    labels   -1 ... -1     a c b        (target="per_step"; -1 is not scored)

A memory-horizon probe: the distance between a data token and its recall grows with
``gap_length``, and the positions vary, so a fixed delay line does not solve it. Token ids:
0 padding, 1 blank, 2 copy marker, 3.. the ``alphabet`` data tokens; labels are data indices in
``[0, alphabet)``. Splits come from disjoint seed streams (see `tasks._util.rng`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import _generated, _util
from ._base import TaskInfo
from ._registry import TaskSpec

BLANK, MARKER, FIRST_DATA = 1, 2, 3


@dataclasses.dataclass(frozen=True)
class SelectiveCopyConfig(_generated.GeneratedConfig):
    """Options of selective copying (`tasks._generated.GeneratedConfig` plus these; defaults:
    the Mamba paper's setting, L = 4096).

    Attributes:
        num_tokens: data tokens to memorise and recall.
        gap_length: blank tokens among the data; ``seq_len = gap_length + 2 * num_tokens``.
        alphabet: distinct data tokens (classes).
    """

    num_tokens: int = 16
    gap_length: int = 4064
    alphabet: int = 16

    task = "selective_copy"

    def __post_init__(self):
        super().__post_init__()
        _util.integer("selective_copy.num_tokens", self.num_tokens, low=1)
        _util.integer("selective_copy.gap_length", self.gap_length, low=0)
        _util.integer("selective_copy.alphabet", self.alphabet, low=2)

    @property
    def seq_len(self) -> int:
        return self.gap_length + 2 * self.num_tokens


def sample(cfg: SelectiveCopyConfig, n: int, g: np.random.Generator):
    """``n`` sequences: inputs ``(n, L) int32`` and per-step labels ``(n, L) int32``."""
    T, context = cfg.num_tokens, cfg.gap_length + cfg.num_tokens
    data = g.integers(0, cfg.alphabet, size=(n, T))
    # Sorted distinct positions in the context: argsort of uniform noise, first T, sorted.
    positions = np.sort(np.argsort(g.random((n, context)), axis=1)[:, :T], axis=1)
    inputs = np.full((n, cfg.seq_len), BLANK, dtype=np.int32)
    np.put_along_axis(inputs, positions, FIRST_DATA + data, axis=1)
    inputs[:, context:] = MARKER
    labels = np.full((n, cfg.seq_len), -1, dtype=np.int32)
    labels[:, context:] = data
    return inputs, labels


def sample_blocks(
    cfg: SelectiveCopyConfig, n: int, g: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`sample` in blocks of 4096 sequences from one generator, so that the ``(n, context)``
    noise behind the positions stays small."""
    parts = [sample(cfg, min(4096, n - i), g) for i in range(0, n, 4096)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def make(cfg: SelectiveCopyConfig) -> dict[str, np.ndarray]:
    return _generated.fixed_length(cfg, sample_blocks, cfg.seq_len)


def info(cfg: SelectiveCopyConfig, arrays=None) -> TaskInfo:
    return TaskInfo(
        name="selective_copy",
        description=DESCRIPTION,
        seq_len=cfg.seq_len,
        variable_length=False,
        input_kind="tokens",
        vocab_size=FIRST_DATA + cfg.alphabet,
        num_classes=cfg.alphabet,
        target="per_step",
    )


DESCRIPTION = (
    "Selective copying (Mamba): recall data tokens scattered among blanks, in order, after a "
    "gap of gap_length; per-step labels."
)

TASKS = {
    "selective_copy": TaskSpec(
        name="selective_copy",
        description=DESCRIPTION,
        label="Selective copying",
        config_cls=SelectiveCopyConfig,
        make=make,
        info=info,
        presets={
            "smoke": dict(num_train=256, num_val=64, num_test=64, num_tokens=4, gap_length=24,
                          alphabet=8),
            "cpu": dict(num_train=5000, num_val=500, num_test=500, num_tokens=8,
                        gap_length=240, alphabet=16),
            "gpu": dict(num_train=100_000, num_val=2_000, num_test=2_000, num_tokens=16,
                        gap_length=4064, alphabet=16),
        },
    )
}
