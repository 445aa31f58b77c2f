"""The shared engine: computes a `DiscreteSystem` on one sequence, for all four layers.

    h_t = lambda * h_{t-1} + b_t,        b_t = B u_t            (forward)
    g_t = lambda * g_{t+1} + b_t                                 (reverse, bidirectional only)
    y_t = out(C h_t) [+ out(C_reverse g_t)] + D * u_t

Algorithms (validated, and the one that runs is what `resolve_algorithm` returns):

- ``"sequential"``: a `lax.scan` over time; the CPU default.
- ``"parallel"``: `lax.associative_scan`, O(log L) depth; the accelerator default.
- ``"convolution"``: the impulse response K_l = out(C diag(lambda^l) B) applied by FFT; only for
  banks of single-input single-output systems (S4D), where K is (L, H) rather than (L, H, H).
- ``"auto"``: convolution for banks, else sequential on CPU and parallel on accelerators.

Every function maps one unbatched sequence; batching is `jax.vmap` by the caller.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Complex, Float

from ._system import DiscreteSystem

Algorithm = Literal["auto", "sequential", "parallel", "convolution"]
ALGORITHMS: tuple[str, ...] = ("auto", "sequential", "parallel", "convolution")


def resolve_algorithm(
    algorithm: str, system: DiscreteSystem, backend: str | None = None
) -> Literal["sequential", "parallel", "convolution"]:
    """The concrete algorithm that `apply` runs for ``algorithm`` on ``system``.

    ``"auto"`` picks by structure and backend (``jax.default_backend()`` unless given). An
    explicit choice that cannot serve the system is an error, never a silent fallback.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {algorithm!r}; accepted values: {ALGORITHMS}.")
    if algorithm == "auto":
        if system.structure == "bank":
            return "convolution"
        backend = jax.default_backend() if backend is None else backend
        return "sequential" if backend == "cpu" else "parallel"
    if algorithm == "convolution" and system.structure != "bank":
        raise ValueError(
            "algorithm='convolution' needs a bank of single-input single-output systems "
            "(structure='bank', as S4D); a MIMO system's kernel is (L, H, H). "
            "Use 'sequential' or 'parallel'."
        )
    return algorithm  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Input and output maps


def input_sequence(system: DiscreteSystem, u: Float[Array, "L H"]) -> Complex[Array, "L P"]:
    """b_t = B u_t for every t, flattened to (L, P)."""
    if system.structure == "bank":
        L = u.shape[0]
        return (u[:, :, None] * system.B[None]).reshape(L, -1)
    # Two real matmuls: XLA's CPU complex matmul is slower than real ones on real inputs.
    return jax.lax.complex(u @ system.B.real.T, u @ system.B.imag.T)


def readout(
    system: DiscreteSystem, h: Complex[Array, "L P"], C: Complex[Array, "..."]
) -> Float[Array, "L H"]:
    """out(C h_t) for every t: Re or 2 Re of the output map applied to the states."""
    if system.structure == "bank":
        L = h.shape[0]
        hb = h.reshape(L, *C.shape)
        y = jnp.sum(hb.real * C.real - hb.imag * C.imag, axis=-1)
    else:
        y = h.real @ C.real.T - h.imag @ C.imag.T
    return system.output_scale * y


# --------------------------------------------------------------------------------------------
# The recurrence


def scan(
    lam: Complex[Array, " P"],
    b: Complex[Array, "L P"],
    *,
    reverse: bool = False,
    algorithm: Literal["sequential", "parallel"] = "sequential",
) -> Complex[Array, "L P"]:
    """h_t = lam * h_{t-1} + b_t with h_{-1} = 0 (or from the end if ``reverse``)."""
    if algorithm == "sequential":

        def step(h, b_t):
            h = lam * h + b_t
            return h, h

        _, h = jax.lax.scan(step, jnp.zeros_like(b[0]), b, reverse=reverse)
        return h
    elif algorithm == "parallel":

        def combine(left, right):
            a_l, b_l = left
            a_r, b_r = right
            return a_r * a_l, a_r * b_l + b_r

        a = jnp.broadcast_to(lam, b.shape)
        _, h = jax.lax.associative_scan(combine, (a, b), reverse=reverse)
        return h
    else:
        raise ValueError(
            f"scan algorithm must be 'sequential' or 'parallel', got {algorithm!r}."
        )


def powers(lam: Complex[Array, "..."], length: int) -> Complex[Array, "L ..."]:
    """lam^l for l = 0..length-1, stacked on a new leading axis."""

    def step(p, _):
        return p * lam, p

    _, out = jax.lax.scan(step, jnp.ones_like(lam), None, length=length)
    return out


def kernel(system: DiscreteSystem, length: int, *, reverse: bool = False) -> Float[Array, "..."]:
    """The impulse response K_l = out(C diag(lam^l) B), l = 0..length-1.

    Returns ``(L, H)`` for a bank (channel h's own kernel) and ``(L, H, H)`` for a MIMO system
    (output channel, input channel). ``reverse`` uses ``C_reverse``.
    """
    C = system.C_reverse if reverse else system.C
    if C is None:
        raise ValueError("kernel(reverse=True) needs a bidirectional system (C_reverse set).")
    lam_pow = powers(system.lam, length)
    if system.structure == "bank":
        k = jnp.einsum("hn,lhn->lh", C * system.B, lam_pow)
    else:
        k = jnp.einsum("ip,lp,pj->lij", C, lam_pow, system.B)
    return system.output_scale * k.real


def _fft_conv(u: Float[Array, "L H"], k: Float[Array, "L H"]) -> Float[Array, "L H"]:
    L = u.shape[0]
    n = 2 * L  # zero-padding to 2L turns the FFT's circular convolution into a causal one
    y = jnp.fft.irfft(jnp.fft.rfft(u, n=n, axis=0) * jnp.fft.rfft(k, n=n, axis=0), n=n, axis=0)
    return y[:L]


# --------------------------------------------------------------------------------------------
# The layer's computation


def apply(
    system: DiscreteSystem, u: Float[Array, "L H"], *, algorithm: str = "auto"
) -> Float[Array, "L H"]:
    """y = the system's output on the input sequence ``u`` (both directions, plus D u)."""
    _check_input(system, u)
    algo = resolve_algorithm(algorithm, system)
    if algo == "convolution":
        L = u.shape[0]
        y = _fft_conv(u, kernel(system, L))
        if system.bidirectional:
            y = y + _fft_conv(u[::-1], kernel(system, L, reverse=True))[::-1]
    else:
        b = input_sequence(system, u)
        y = readout(system, scan(system.lam.reshape(-1), b, algorithm=algo), system.C)
        if system.bidirectional:
            g = scan(system.lam.reshape(-1), b, reverse=True, algorithm=algo)
            y = y + readout(system, g, system.C_reverse)
    return y + system.D * u


def hidden_states(
    system: DiscreteSystem, u: Float[Array, "L H"], *, algorithm: str = "auto", reverse: bool = False
) -> Complex[Array, "L P"]:
    """The forward (or reverse-time) states h_t, (L, P), for diagnostics."""
    _check_input(system, u)
    algo = resolve_algorithm(algorithm, system)
    if algo == "convolution":
        # States are a recurrence quantity; the sequential scan is exact and memory-light.
        algo = "sequential" if jax.default_backend() == "cpu" else "parallel"
    return scan(system.lam.reshape(-1), input_sequence(system, u), reverse=reverse, algorithm=algo)


def _check_input(system: DiscreteSystem, u: Array) -> None:
    if u.ndim != 2 or u.shape[1] != system.d_model:
        raise ValueError(
            f"Expected one unbatched sequence of shape (L, H) with H = {system.d_model}, got "
            f"shape {tuple(u.shape)}. Batch with jax.vmap."
        )
