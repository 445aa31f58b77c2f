"""The shared engine: computes a `DiscreteSystem` on one sequence, for all four layers.

    h_t = lambda * h_{t-1} + b_t,        b_t = B u_t            (forward)
    g_t = lambda * g_{t+1} + b_t                                 (reverse, bidirectional only)
    y_t = out(C h_t) [+ out(C_reverse g_t)] + D * u_t

Algorithms (validated, and the one that runs is what `resolve_algorithm` returns):

- ``"sequential"``: a loop over time that writes the states over the input sequence in place,
  compiled by XLA (see `models._scan`).
- ``"native"``: C++ kernels called through XLA's FFI (`models._native`), CPU only, the CPU
  default for banks when their library builds: for a MIMO system the same in-place loop
  (unfused: the input and output maps are XLA matmuls); for a bank, the
  recurrence fused with its readout (`models._native.bank`), which never stores the (L, H N)
  states and saves only chunk checkpoints for its backward pass; on CPU it is faster than the
  FFT convolution, forward and backward (docs/performance.md, "Measurements behind the code").
- ``"parallel"``: odd-even reduction, O(log L) depth; the accelerator default.
- ``"convolution"``: the impulse response K_l = out(C diag(lambda^l) B) applied by FFT; only for
  banks of single-input single-output systems (S4D), where K is (L, H) rather than (L, H, H).
- ``"fused"``: a MIMO system's input map, recurrence and readout fused in one C++ call per
  direction, chunk by chunk with OpenBLAS GEMMs (`models._native.mimo`), CPU only; the CPU
  default for MIMO systems. A training step saves the states and makes no other state-sized
  buffer (about one state sequence of working memory, against about three for the unfused
  ``"native"``), at the unfused kernel's speed (the measurements: docs/performance.md).
- ``"chunked"``: the sequential recurrence fused with the input and output maps, chunk by
  chunk, with a backward pass that saves only the state entering each chunk (`models._fused`);
  MIMO systems only. It trades speed for memory: forward+backward keeps a fraction of one
  state sequence, against about three for the native path, and is slower than it
  (docs/performance.md), so ``"auto"`` never picks it; ask for it when memory binds.
- ``"auto"``: on CPU native for banks and fused for MIMO systems (when the kernels cannot be
  built, `models._native.status` says why and a bank runs the convolution, a MIMO system the
  sequential loop); on accelerators the convolution for banks and parallel otherwise.

Both recurrences share one hand-written backward pass that saves only the states (O(L P)
memory), so training through `apply` never differentiates the loop itself. Inside `apply` the
states are kept in the planar real form of `models._scan` ((L, 2, P): real parts, imaginary
parts), so the input and output maps are single real matmuls outside the scan and no pass is
spent converting to and from complex numbers; the public `input_sequence`, `readout`, `scan`
and `hidden_states` speak complex arrays. Every function maps one unbatched sequence; batching
is `jax.vmap` by the caller, which carries the batch inside the scan's loop.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float, Inexact

from . import _native, _validate
from ._fused import fused_recurrence
from ._native.bank import bank_output
from ._native.mimo import mimo_output
from ._scan import linear_scan as scan  # public as models.scan
from ._scan import planar_scan, to_complex, to_planar
from ._system import DiscreteSystem

Algorithm = Literal[
    "auto", "sequential", "native", "fused", "parallel", "chunked", "convolution"
]
ALGORITHMS: tuple[str, ...] = (
    "auto", "sequential", "native", "fused", "parallel", "chunked", "convolution"
)
# What a layer's config may ask for: a MIMO system's kernel is (L, H, H), which the engine does
# not apply by FFT; "chunked" and "fused" fuse MIMO matmuls with the scan, and a bank has none.
MIMO_ALGORITHMS: tuple[str, ...] = tuple(a for a in ALGORITHMS if a != "convolution")
BANK_ALGORITHMS: tuple[str, ...] = tuple(a for a in ALGORITHMS if a not in ("chunked", "fused"))
Resolved = Literal["sequential", "native", "fused", "parallel", "chunked", "convolution"]
Recurrence = Literal["sequential", "native", "parallel"]


# The backend ``"auto"`` resolves for when none is given: None is the process's own
# (``jax.default_backend()``); `assume_backend` sets another while a program is traced.
_assumed_backend: str | None = None


@contextlib.contextmanager
def assume_backend(backend: str) -> Iterator[None]:
    """Inside the block, resolve algorithms as on ``backend`` (e.g. ``"gpu"``): what
    ``"auto"`` picks there, and the CPU kernels refused as they would be there.

    The resolution happens when a program is traced, so only programs traced inside the block
    follow it: the rehearsal of an accelerator's code on a CPU (`harness.plan`) clears JAX's
    trace caches on entry and exit so that no program traced outside is reused inside or
    the other way round.
    """
    global _assumed_backend
    previous = _assumed_backend
    jax.clear_caches()
    _assumed_backend = backend
    try:
        yield
    finally:
        _assumed_backend = previous
        jax.clear_caches()


def _backend(backend: str | None) -> str:
    if backend is not None:
        return backend
    return _assumed_backend if _assumed_backend is not None else jax.default_backend()


def resolve_algorithm(
    algorithm: str, system: DiscreteSystem, backend: str | None = None
) -> Resolved:
    """The concrete algorithm that `apply` runs for ``algorithm`` on ``system``.

    ``"auto"`` picks by backend (``jax.default_backend()`` unless given or assumed by
    `assume_backend`) and structure: on
    ``"cpu"`` with the native kernels available, native for a bank and fused for a MIMO system
    (without them, convolution for a bank and sequential otherwise); on other backends
    convolution for a bank and parallel otherwise. An explicit choice that cannot serve the
    system or the backend is an error, never a silent fallback.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {algorithm!r}; accepted values: {ALGORITHMS}.")
    backend = _backend(backend)
    if algorithm == "auto":
        if system.structure == "bank":
            return "native" if _native.runs_on(backend) else "convolution"
        # MIMO: the fused kernel runs at the unfused native path's speed with a third of its
        # working memory (module docstring).
        return "fused" if _native.runs_on(backend) else _recurrence_for(backend)
    if algorithm in ("native", "fused"):
        if backend != "cpu":
            raise ValueError(
                f"algorithm={algorithm!r} is a CPU kernel; the backend is {backend!r}. Use "
                "'parallel' or 'sequential' (or 'auto')."
            )
        native = _native.status()
        if not native.available:
            raise ValueError(
                f"algorithm={algorithm!r} is not available in this process: {native.reason}. "
                "Use 'sequential' (the same loop compiled by XLA), 'chunked' or 'auto'."
            )
    if algorithm == "convolution" and system.structure != "bank":
        raise ValueError(
            "algorithm='convolution' needs a bank of single-input single-output systems "
            "(structure='bank', as S4D); a MIMO system's kernel is (L, H, H). "
            "Use 'sequential' or 'parallel'."
        )
    if algorithm in ("chunked", "fused") and system.structure != "mimo":
        raise ValueError(
            f"algorithm={algorithm!r} fuses a MIMO system's input and output matmuls with its "
            "scan; a bank of single-input single-output systems (S4D) has none (its 'native' "
            "kernel fuses its readout). Use 'native', 'convolution', 'sequential' or 'parallel'."
        )
    return algorithm  # type: ignore[return-value]


def _recurrence_for(backend: str | None) -> Recurrence:
    # On CPU the loop is the fastest algorithm, and its C++ kernel beats XLA's compiled loop
    # forward+backward (docs/performance.md, "Measurements behind the code").
    # On an accelerator a loop of L dependent steps leaves the device idle, so the O(log L)-depth
    # scan is the default there, as in the papers' code; no accelerator was available to time
    # the two here.
    backend = _backend(backend)
    if _native.runs_on(backend):
        return "native"
    return "sequential" if backend == "cpu" else "parallel"


# --------------------------------------------------------------------------------------------
# Input and output maps


def input_sequence(system: DiscreteSystem, u: Float[Array, "L H"]) -> Complex[Array, "L P"]:
    """b_t = B u_t for every t, flattened to (L, P) (channel-major for a bank)."""
    return to_complex(_planar_input(system, u))


def readout(
    system: DiscreteSystem, h: Complex[Array, "L P"], C: Complex[Array, "..."]
) -> Float[Array, "L H"]:
    """out(C h_t) for every t: Re or 2 Re of the output map applied to the states."""
    return _planar_readout(system, to_planar(h), C)


def _planar_input(system: DiscreteSystem, u: Float[Array, "L H"]) -> Float[Array, "L 2 P"]:
    """`input_sequence` in the planar form (real parts, imaginary parts) of `models._scan`."""
    length = u.shape[0]
    if system.structure == "bank":
        # b[t, h, n] = B[h, n] u[t, h]: H scalings, never a dense (H N) x H matrix.
        parts = jnp.stack([system.B.real, system.B.imag])  # (2, H, N)
        return (u[:, None, :, None] * parts[None]).reshape(length, 2, -1)
    # One real matmul against [Re B; Im B] gives both planes, already in place.
    return (u @ _planar_input_matrix(system).T).reshape(length, 2, -1)


def _planar_input_matrix(system: DiscreteSystem) -> Float[Array, "_ H"]:
    """A MIMO system's input map in the planar form, ``[Re B; Im B]``, ``(2P, H)``."""
    return jnp.concatenate([system.B.real, system.B.imag], axis=0)


def _planar_output_matrix(system: DiscreteSystem, C: Complex[Array, "H P"]) -> Float[Array, "H _"]:
    """A MIMO output map in the planar form, its scale included: ``s [Re C, -Im C]``."""
    return system.output_scale * jnp.concatenate([C.real, -C.imag], axis=1)


def _planar_readout(
    system: DiscreteSystem, h: Float[Array, "L 2 P"], C: Complex[Array, "..."]
) -> Float[Array, "L H"]:
    """`readout` in the planar form: Re(C h) = Re C Re h - Im C Im h."""
    length = h.shape[0]
    if system.structure == "bank":
        hb = h.reshape(length, 2, *C.shape)
        y = jnp.sum(hb[:, 0] * C.real[None] - hb[:, 1] * C.imag[None], axis=-1)
    else:
        y = h.reshape(length, -1) @ jnp.concatenate([C.real, -C.imag], axis=1).T
    return system.output_scale * y


# --------------------------------------------------------------------------------------------
# The recurrence


def _planar_states(
    system: DiscreteSystem, b: Float[Array, "L 2 P"], algorithm: str, *, reverse: bool = False
) -> Float[Array, "L 2 P"]:
    lam = system.lam.reshape(-1)
    return planar_scan(lam.real, lam.imag, b, reverse=reverse, algorithm=algorithm)


def powers(lam: Inexact[Array, "..."], length: int) -> Inexact[Array, "L ..."]:
    """lam^l for l = 0..length-1, stacked on a new leading axis.

    Built in blocks, lam^(c j + i) = (lam^c)^j * lam^i with c about sqrt(length): two short
    power tables (small scans, never ``exp`` of a long grid, which XLA recomputes per element)
    and one outer product. The rounding error grows like (c + length / c) ulp rather than
    like ``length`` ulp for plain repeated multiplication.
    """
    inner, outer = _power_tables(lam, length)
    table = outer[:, None] * inner[None]
    return table.reshape(-1, *lam.shape)[:length]


def _power_tables(lam: Inexact[Array, "..."], length: int):
    """(lam^i for i < c, lam^(c j) for j < ceil(length / c)), with c = ceil(sqrt(length))."""
    block = max(1, math.isqrt(max(length - 1, 0)) + 1)
    inner = _power_scan(lam, block)
    outer = _power_scan(inner[-1] * lam, -(-length // block))
    return inner, outer


def _power_scan(lam: Inexact[Array, "..."], length: int) -> Inexact[Array, "n ..."]:
    def step(p, _):
        return p * lam, p

    _, out = jax.lax.scan(step, jnp.ones_like(lam), None, length=length)
    return out


def kernel(system: DiscreteSystem, length: int, *, reverse: bool = False) -> Float[Array, "..."]:
    """The impulse response K_l = out(C diag(lam^l) B), l = 0..length-1.

    Returns ``(L, H)`` for a bank (channel h's own kernel) and ``(L, H, H)`` for a MIMO system
    (output channel, input channel). ``reverse`` uses ``C_reverse``: the response of the
    reverse-time scan to an impulse ``l`` steps later.

    A bank's kernel is built by blocked matmuls: with l = c j + i,
    K[l, h] = Re sum_n (C B)[h, n] (lam^c)^j[h, n] lam^i[h, n], a product of a (J, N) and an
    (N, c) matrix per channel, so no (L, H, N) tensor is formed.
    """
    _validate.non_negative_int("kernel length", length)
    C = system.C_reverse if reverse else system.C
    if C is None:
        raise ValueError("kernel(reverse=True) needs a bidirectional system (C_reverse set).")
    if length == 0:
        channels = (system.d_model,) * (1 if system.structure == "bank" else 2)
        return jnp.zeros((0, *channels), system.B.real.dtype)
    if system.structure == "bank":
        inner, outer = _power_tables(system.lam, length)
        weighted = (C * system.B)[None] * outer  # (J, H, N)
        k = jnp.einsum("jhn,ihn->jih", weighted.real, inner.real) - jnp.einsum(
            "jhn,ihn->jih", weighted.imag, inner.imag
        )
        k = k.reshape(-1, system.d_model)[:length]
    else:
        lam_pow = powers(system.lam, length)  # (L, P)
        cb = C.T[:, :, None] * system.B[:, None, :]  # (P, H, H): C[i, p] B[p, j]
        cb = cb.reshape(system.state_size, -1)
        k = lam_pow.real @ cb.real - lam_pow.imag @ cb.imag
        k = k.reshape(length, system.d_model, system.d_model)
    return system.output_scale * k


def _fft_conv(
    u: Float[Array, "L H"], causal: Float[Array, "L H"], anticausal: Float[Array, "L H"] | None
) -> Float[Array, "L H"]:
    """y_t = sum_{k>=0} causal_k u_{t-k} [+ sum_{k>=0} anticausal_k u_{t+k}] by one FFT pair.

    Zero-padding to 2L makes the circular convolution exact; the anticausal kernel sits at
    the negative lags -k = 2L - k of the same circular kernel, so both directions cost one
    transform of ``u``. The transforms run along the last axis of (H, L) arrays, which on CPU
    is faster than transforming along the time axis of (L, H) (docs/performance.md).
    """
    length, channels = u.shape
    n = 2 * length
    full = jnp.zeros((channels, n), causal.dtype).at[:, :length].set(causal.T)
    if anticausal is not None:
        full = full.at[:, 0].add(anticausal[0])
        full = full.at[:, n - length + 1 :].add(anticausal[1:][::-1].T)
    spectrum = jnp.fft.rfft(u.T, n=n, axis=-1) * jnp.fft.rfft(full, axis=-1)
    y = jnp.fft.irfft(spectrum, n=n, axis=-1)[:, :length]
    return y.T.astype(u.dtype)


# --------------------------------------------------------------------------------------------
# The layer's computation


def apply(
    system: DiscreteSystem, u: Float[Array, "L H"], *, algorithm: str = "auto"
) -> Float[Array, "L H"]:
    """y = the system's output on the input sequence ``u`` (both directions, plus D u).

    Arguments:
        system: the discrete system.
        u: one unbatched input sequence, ``(L, H)``.
        algorithm: one of `ALGORITHMS`; what runs is ``resolve_algorithm(algorithm, system)``.

    Returns:
        ``y``, ``(L, H)``.
    """
    _check_input(system, u)
    algo = resolve_algorithm(algorithm, system)
    if u.shape[0] == 0:
        # An empty sequence has an empty output, whatever the algorithm (the kernels and the
        # FFT would otherwise each fail their own way on a zero-length axis).
        return jnp.zeros_like(u)
    if algo == "convolution":
        length = u.shape[0]
        anticausal = kernel(system, length, reverse=True) if system.bidirectional else None
        y = _fft_conv(u, kernel(system, length), anticausal)
    elif algo == "native" and system.structure == "bank":
        y = bank_output(system, u)
        if system.bidirectional:
            y = y + bank_output(system, u, reverse=True)
    elif algo in ("fused", "chunked"):
        # The input map, the scan and the readout fused chunk by chunk, in C++ or in XLA.
        fused = mimo_output if algo == "fused" else fused_recurrence
        lam, B_in = system.lam, _planar_input_matrix(system)
        y = fused(lam.real, lam.imag, B_in, _planar_output_matrix(system, system.C), u)
        if system.bidirectional:
            C_out = _planar_output_matrix(system, system.C_reverse)
            y = y + fused(lam.real, lam.imag, B_in, C_out, u, reverse=True)
    else:
        b = _planar_input(system, u)
        y = _planar_readout(system, _planar_states(system, b, algo), system.C)
        if system.bidirectional:
            g = _planar_states(system, b, algo, reverse=True)
            y = y + _planar_readout(system, g, system.C_reverse)
    return y + system.D[None] * u


def hidden_states(
    system: DiscreteSystem,
    u: Float[Array, "L H"],
    *,
    algorithm: str = "auto",
    reverse: bool = False,
) -> Complex[Array, "L P"]:
    """The forward (or reverse-time) states h_t, ``(L, P)``, for diagnostics.

    States are a recurrence quantity: when ``algorithm`` resolves to ``"convolution"``, the
    states come from the backend's recurrence (native or sequential on CPU, parallel
    elsewhere), which computes the same system exactly; ``"chunked"`` never makes them, so they
    come from the sequential recurrence it fuses, and ``"fused"``'s from the native scan; for a
    bank, ``"native"``'s fused kernel never makes them either, so they come from the native
    scan over the flattened (L, H N) states.
    """
    _check_input(system, u)
    algo = resolve_algorithm(algorithm, system)
    if u.shape[0] == 0:
        empty = jnp.zeros((0, system.state_size), u.dtype)
        return jax.lax.complex(empty, empty)
    if algo == "convolution":
        algo = _recurrence_for(None)
    elif algo == "chunked":
        algo = "sequential"
    elif algo == "fused":
        algo = "native"
    return to_complex(_planar_states(system, _planar_input(system, u), algo, reverse=reverse))


def _check_input(system: DiscreteSystem, u: Array) -> None:
    # Tracers are jax.Array instances too, so this passes under jit and vmap.
    if not isinstance(u, (jax.Array, np.ndarray)):
        raise TypeError(
            f"Expected the input sequence as a JAX or NumPy array of shape (L, H) with "
            f"H = {system.d_model}, got a {type(u).__name__}. Convert it with jnp.asarray(u)."
        )
    if u.ndim != 2 or u.shape[1] != system.d_model:
        raise ValueError(
            f"Expected one unbatched sequence of shape (L, H) with H = {system.d_model}, got "
            f"shape {tuple(u.shape)}. Batch with jax.vmap."
        )
    if not jnp.issubdtype(u.dtype, jnp.floating):
        raise ValueError(
            f"Expected a real floating-point input sequence, got dtype {u.dtype}. "
            "Cast the input with u.astype(jnp.float32)."
        )
