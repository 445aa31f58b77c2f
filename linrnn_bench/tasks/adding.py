"""The adding problem (Hochreiter & Schmidhuber 1997; as in Le et al. 2015, Arjovsky et al. 2016).

Each step carries two features: a value drawn uniformly from [0, 1) and a marker, 1 at exactly
two steps and 0 elsewhere. The target is the sum of the two marked values (``target =
"regression"``). The first marker lies uniformly in the first half of the sequence, the second in
the second half, so the model must hold a value for about ``seq_len / 2`` steps on average: a
memory-horizon probe whose difficulty grows with ``seq_len``. Predicting the constant 1 gives a
mean squared error of 1/6 ~ 0.167, the baseline to beat. Splits come from disjoint seed streams.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import _generated, _util
from ._base import TaskInfo
from ._registry import TaskSpec


@dataclasses.dataclass(frozen=True)
class AddingConfig(_generated.GeneratedConfig):
    """Options of the adding problem (`tasks._generated.GeneratedConfig` plus these).

    Attributes:
        seq_len: T, the sequence length (the memory horizon grows with it).
    """

    seq_len: int = 1000

    task = "adding"

    def __post_init__(self):
        super().__post_init__()
        _util.integer("adding.seq_len", self.seq_len, low=2)


def sample(cfg: AddingConfig, n: int, g: np.random.Generator):
    """``n`` sequences: inputs ``(n, T, 2) float32`` and targets ``(n,) float32``."""
    T, half = cfg.seq_len, cfg.seq_len // 2
    values = g.random((n, T), dtype=np.float32)
    first = g.integers(0, half, size=n)
    second = g.integers(half, T, size=n)
    markers = np.zeros((n, T), dtype=np.float32)
    rows = np.arange(n)
    markers[rows, first] = 1.0
    markers[rows, second] = 1.0
    target = values[rows, first].astype(np.float64) + values[rows, second]
    return np.stack([values, markers], axis=-1), target.astype(np.float32)


def make(cfg: AddingConfig) -> dict[str, np.ndarray]:
    return _generated.fixed_length(cfg, sample, cfg.seq_len)


def info(cfg: AddingConfig, arrays=None) -> TaskInfo:
    return TaskInfo(
        name="adding",
        description=DESCRIPTION,
        seq_len=cfg.seq_len,
        variable_length=False,
        input_kind="real",
        input_dim=2,
        num_classes=1,
        target="regression",
    )


DESCRIPTION = (
    "Adding problem: sum the two marked values of a length-seq_len sequence (regression; "
    "constant-prediction MSE 1/6)."
)

TASKS = {
    "adding": TaskSpec(
        name="adding",
        description=DESCRIPTION,
        label="Adding problem",
        config_cls=AddingConfig,
        make=make,
        info=info,
        presets={
            "smoke": dict(num_train=256, num_val=64, num_test=64, seq_len=50),
            "cpu": dict(num_train=5000, num_val=500, num_test=500, seq_len=200),
            "gpu": dict(num_train=100_000, num_val=2_000, num_test=2_000, seq_len=1000),
        },
    )
}
