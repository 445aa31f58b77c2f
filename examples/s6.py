"""A selective state-space layer, S6 (Gu & Dao 2023, "Mamba", Section 3 and Algorithm 2), written
outside linrnn-bench the way a user adds their own layer: one Equinox module, one config, one
`models.register` line. It is not built on the package's engine: its recurrence is
time-varying (Delta, B and C depend on the input), so it has no fixed discrete system, and it
declares only the capabilities it has (hidden states, a recurrent parameter group).

For each channel d of the input x (L, D), with state size N and Delta rank R:

    Delta_t = softplus(W_up W_down x_t + b_Delta)                (D,)
    B_t     = W_B x_t,   C_t = W_C x_t                           (N,) each, shared by the channels
    A       = -exp(A_log)                                        (D, N), real and negative
    h_t[d]  = exp(Delta_t[d] A[d]) * h_{t-1}[d] + Delta_t[d] B_t x_t[d]     (N,) per channel
    y_t[d]  = <C_t, h_t[d]> + D_skip[d] x_t[d]

The A part is the zero-order hold exp(Delta A), the B part the simplified Euler form Delta B, as
the paper's code has them.

Initialisation (the paper's): A_log[d, n] = log(n + 1) (S4D-Real), D_skip = 1, and b_Delta the
inverse softplus of a log-uniform draw in [dt_min, dt_max].

Use it from the command line by its import path, from the repository root (``linrnn-bench``
finds the modules of the folder it runs in, as ``python -m`` does):

    linrnn-bench check-layer examples.s6:S6
    linrnn-bench study throughput --preset smoke "models=(examples.s6:S6,lru)"
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from linrnn_bench import models


@dataclasses.dataclass(frozen=True)
class S6Config:
    """S6's options.

    Attributes:
        d_model: D, channels.
        d_state: N, states per channel.
        dt_rank: R, the rank of the Delta map; 0 means ceil(D / 16), the paper's code's choice.
        dt_min, dt_max: the range of the log-uniform initial Delta.
    """

    d_model: int
    d_state: int
    dt_rank: int = 0
    dt_min: float = 0.001
    dt_max: float = 0.1

    def __post_init__(self):
        for name in ("d_model", "d_state"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"S6Config.{name} must be a positive integer, got {value!r}.")
        if isinstance(self.dt_rank, bool) or not isinstance(self.dt_rank, int) or self.dt_rank < 0:
            raise ValueError(f"S6Config.dt_rank must be an integer >= 0, got {self.dt_rank!r}.")
        if not 0 < self.dt_min <= self.dt_max:
            raise ValueError(
                f"S6Config needs 0 < dt_min <= dt_max, got {self.dt_min!r}, {self.dt_max!r}."
            )

    @property
    def rank(self) -> int:
        return self.dt_rank or math.ceil(self.d_model / 16)


def _inverse_softplus(y: Float[Array, "..."]) -> Float[Array, "..."]:
    # softplus(x) = y  <=>  x = y + log(1 - exp(-y))
    return y + jnp.log(-jnp.expm1(-y))


def _dense(key: PRNGKeyArray, rows: int, cols: int) -> Float[Array, "rows cols"]:
    return jr.normal(key, (rows, cols)) / math.sqrt(cols)


@models.register(
    "s6",
    S6Config,
    label="S6",
    note="selective SSM (Mamba's S6), registered from outside",
    paper_size=models.PaperSize(
        128, 16, (), "Mamba (Gu & Dao 2023): N = 16 states per channel; H = 128 as the others"
    ),
    capabilities=frozenset({models.HIDDEN_STATES, models.RECURRENT_MASK}),
)
class S6(eqx.Module):
    """S6 on one sequence ``(L, D) -> (L, D)``; the maths is in the module docstring."""

    A_log: Float[Array, "D N"]
    D_skip: Float[Array, " D"]
    W_down: Float[Array, "R D"]
    W_up: Float[Array, "D R"]
    b_delta: Float[Array, " D"]
    W_B: Float[Array, "N D"]
    W_C: Float[Array, "N D"]

    def __init__(self, config: S6Config, *, key: PRNGKeyArray):
        D, N, R = config.d_model, config.d_state, config.rank
        k_down, k_up, k_dt, k_b, k_c = jr.split(key, 5)
        self.A_log = jnp.log(jnp.broadcast_to(jnp.arange(1, N + 1, dtype=jnp.float32), (D, N)))
        self.D_skip = jnp.ones((D,))
        self.W_down = _dense(k_down, R, D)
        self.W_up = _dense(k_up, D, R)
        log_dt = jr.uniform(
            k_dt, (D,), minval=math.log(config.dt_min), maxval=math.log(config.dt_max)
        )
        self.b_delta = _inverse_softplus(jnp.exp(log_dt))
        self.W_B = _dense(k_b, N, D)
        self.W_C = _dense(k_c, N, D)

    def _states_and_readout(
        self, x: Float[Array, "L D"]
    ) -> tuple[Float[Array, "L D N"], Float[Array, "L N"]]:
        delta = jax.nn.softplus(x @ self.W_down.T @ self.W_up.T + self.b_delta[None, :])  # (L, D)
        B, C = x @ self.W_B.T, x @ self.W_C.T  # (L, N) each
        A = -jnp.exp(self.A_log)  # (D, N)
        decay = jnp.exp(delta[..., None] * A[None])  # zero-order hold: exp(Delta A), (L, D, N)
        drive = delta[..., None] * B[:, None, :] * x[..., None]  # Euler: Delta B x, (L, D, N)

        def combine(first, second):
            a_i, b_i = first
            a_j, b_j = second
            return a_j * a_i, a_j * b_i + b_j

        _, h = jax.lax.associative_scan(combine, (decay, drive))
        return h, C

    def __call__(self, x: Float[Array, "L D"]) -> Float[Array, "L D"]:
        h, C = self._states_and_readout(x)
        return jnp.einsum("ldn,ln->ld", h, C) + self.D_skip[None, :] * x

    def hidden_states(self, x: Float[Array, "L D"]) -> Float[Array, "L P"]:
        """The states h_t of every channel, flattened channel-major: ``(L, D N)``."""
        h, _ = self._states_and_readout(x)
        return h.reshape(h.shape[0], -1)

    def recurrent_mask(self) -> PyTree[bool]:
        """A_log and the Delta bias set the recurrence's timescales: the recurrent group."""
        mask = jax.tree.map(lambda _: False, self)
        return eqx.tree_at(lambda m: (m.A_log, m.b_delta), mask, (True, True))
