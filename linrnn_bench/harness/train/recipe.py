"""The optimisation recipe of a run (`TrainConfig`): its numbers, validated at construction, and
the learning-rate schedule they define."""

from __future__ import annotations

import dataclasses
import math

import optax

from linrnn_bench import validation


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The optimisation recipe, shared by every model of a comparison.

    Attributes:
        steps: optimiser updates in total.
        batch_size: training examples per update.
        lr: peak learning rate of the regular parameters.
        recurrent_lr: peak learning rate of the recurrent parameters (no weight decay).
        weight_decay: AdamW's decoupled weight decay on the regular parameters.
        warmup_fraction: the share of ``steps`` spent warming up linearly from zero.
        clip_norm: clip the global gradient norm to this value; None for no clipping.
        eval_every: evaluate on validation (and call ``on_eval``) every this many steps; the
            last step is always evaluated.
        eval_batch_size: examples per evaluation batch (memory only; results do not depend on
            it beyond float round-off).
    """

    steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    recurrent_lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_fraction: float = 0.1
    clip_norm: float | None = None
    eval_every: int = 100
    eval_batch_size: int = 256

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_every", "eval_batch_size"):
            validation.positive_int(f"TrainConfig.{name}", getattr(self, name))
        for name, low in (("lr", 0.0), ("recurrent_lr", 0.0), ("weight_decay", 0.0)):
            value = getattr(self, name)
            if not validation.is_number(value) or not (math.isfinite(value) and value >= low):
                raise ValueError(
                    f"TrainConfig.{name} must be a finite number >= {low}, got {value!r}."
                )
        if self.lr == 0.0:
            raise ValueError("TrainConfig.lr must be positive, got 0.0.")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(
                f"TrainConfig.warmup_fraction must lie in [0, 1), got {self.warmup_fraction!r}."
            )
        if self.clip_norm is not None and not (
            isinstance(self.clip_norm, (int, float)) and self.clip_norm > 0
        ):
            raise ValueError(
                f"TrainConfig.clip_norm must be a positive number or None, got {self.clip_norm!r}."
            )

    @property
    def warmup_steps(self) -> int:
        return int(self.warmup_fraction * self.steps)

    def schedule(self, peak: float) -> optax.Schedule:
        """s(t) times ``peak``: linear warm-up from zero, then cosine to zero at ``steps``."""
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=peak,
            warmup_steps=self.warmup_steps,
            decay_steps=self.steps,
            end_value=0.0,
        )
