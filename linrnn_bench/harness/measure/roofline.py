"""The roofline: the machine's measured peaks, a layer's FLOP and byte counts, the lower bound.

A computation that must do F floating-point operations and move Q bytes to and from memory takes
at least

    t_bound = max(F / peak_flops, Q / peak_bandwidth)

on a machine whose matmul throughput is ``peak_flops`` and whose memory bandwidth is
``peak_bandwidth``. The roofline fraction of a measured time t is ``t_bound / t`` in (0, 1]: one
means the computation runs at the machine's limit.

Peaks are *measured*, in the process that measures the workload (`measure_peaks`), so that a
busy machine lowers both the peak and the workload's speed and their ratio survives the noise:

- matmul throughput: the best of several ``n x n @ n x n`` float32 products (2 n^3 FLOP each) at
  JAX's default matmul precision, the precision the layers run at;
- memory bandwidth: the best of several in-place ``x + 1`` passes over a large float32 buffer
  (donated, so the output reuses the input's pages): 2 x 4 bytes per element, read and write.
  Donation matters: with glibc's default settings every fresh buffer over 32 MiB is a new
  ``mmap`` whose first touch page-faults, several times slower than streaming (`allocator`
  records which allocator a process runs on, since tcmalloc keeps freed pages, and
  ``glibc_tunables`` whether glibc was told to keep them, as the Makefile does).

Counts are our own, stated here, not XLA's: XLA's cost analysis counts one complex multiply as
one FLOP (it is six real ones), counts a loop's body once however many steps it runs (so a
sequential scan's work is missing), and counts the algorithm that ran (an FFT, an associative
scan's doubled work), while the bound needs the work any algorithm must do. `layer_counts` gives the
*model FLOPs* of the recurrence form of a `models.DiscreteSystem` (input map, scan, readout, skip)
per `Mode`, and the minimum bytes: every input read once, every output written once, the
parameters (and optimiser state) read and written once. The layer's parametrisation (parameters
to lambda, B, C: O(P H) work independent of L and B) is left out. `xla_costs` reports XLA's
numbers beside ours for comparison.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from linrnn_bench import validation

from .timing import time_calls

Mode = Literal["forward", "forward_backward", "train"]
MODES: tuple[str, ...] = ("forward", "forward_backward", "train")
T = TypeVar("T")

# Real FLOPs of one complex multiply-add h <- lam * h + b: a complex product is 4 multiplies and
# 2 adds, the sum 2 adds.
SCAN_FLOPS_PER_STATE = 8
# Real FLOPs per parameter of one optax.adam update with its bias corrections (optax's update
# order): mu = b1 mu + (1 - b1) g (3), nu = b2 nu + (1 - b2) g^2 (4), mu / (1 - b1^t) and
# nu / (1 - b2^t) (2), -lr mu_hat / (sqrt(nu_hat) + eps) (4), params + update (1).
ADAM_FLOPS_PER_PARAM = 14
# Arrays the adam step reads and writes per parameter: the parameter and its two moments.
ADAM_ARRAYS = 3


# --------------------------------------------------------------------------------------------
# Peaks


@dataclasses.dataclass(frozen=True)
class Peaks:
    """The machine's measured peaks.

    Attributes:
        flops_per_s: matmul throughput, FLOP/s (float32, default precision).
        bytes_per_s: streaming memory bandwidth, bytes/s (read plus write).
        matmul_size: n of the ``n x n`` matmul measured.
        stream_bytes: size in bytes of the buffer streamed.
    """

    flops_per_s: float
    bytes_per_s: float
    matmul_size: int
    stream_bytes: int

    def __post_init__(self):
        for name in ("flops_per_s", "bytes_per_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"Peaks.{name} must be a positive finite number, got {value!r}.")

    @classmethod
    def best(cls, *peaks: Peaks) -> Peaks:
        """The highest throughput of several measurements (a peak is the best one reaches)."""
        if not peaks:
            raise ValueError("Peaks.best needs at least one measurement.")
        flops = max(peaks, key=lambda p: p.flops_per_s)
        stream = max(peaks, key=lambda p: p.bytes_per_s)
        return cls(flops.flops_per_s, stream.bytes_per_s, flops.matmul_size, stream.stream_bytes)


def measure_peaks(*, matmul_size: int = 1024, stream_mib: int = 128, repeats: int = 5) -> Peaks:
    """Measure matmul throughput and memory bandwidth in this process (see the module docstring).

    Arguments:
        matmul_size: n of the float32 ``n x n`` matmul.
        stream_mib: size of the streamed float32 buffer in MiB; make it several times the
            last-level cache.
        repeats: timed repetitions of each, after one warm-up call; the best is kept.
    """
    import jax.numpy as jnp

    for name, value in (("matmul_size", matmul_size), ("stream_mib", stream_mib),
                        ("repeats", repeats)):
        validation.positive_int(f"measure_peaks: {name}", value)
    n = matmul_size
    a = jnp.full((n, n), 1.0 / n, jnp.float32)
    b = jnp.ones((n, n), jnp.float32)
    matmul, stream = _peak_programs()
    best_matmul = time_calls(lambda: matmul(a, b), warmup=1, repeats=repeats).min_s

    count = stream_mib * 2**20 // 4
    state = [jnp.zeros((count,), jnp.float32)]

    def one_pass():
        state[0] = stream(state[0])
        return state[0]

    best_stream = time_calls(one_pass, warmup=1, repeats=repeats).min_s
    return Peaks(
        flops_per_s=2.0 * n**3 / best_matmul,
        bytes_per_s=2.0 * 4 * count / best_stream,
        matmul_size=n,
        stream_bytes=4 * count,
    )


def peaks_around(measure: Callable[[], T], *, matmul_size: int = 1024, stream_mib: int = 128,
                 repeats: int = 5) -> tuple[T, Peaks]:
    """``measure()`` between two measurements of the peaks (`measure_peaks`, with these
    arguments and its defaults): its result and the better of the two, so that the peaks are
    measured under the load the measured call saw."""
    options = {"matmul_size": matmul_size, "stream_mib": stream_mib, "repeats": repeats}
    before = measure_peaks(**options)
    result = measure()
    return result, Peaks.best(before, measure_peaks(**options))


@functools.cache
def _peak_programs() -> tuple[Callable, Callable]:
    """The matmul and the streaming pass, jitted once per process: a study measures the peaks
    around every run, and a fresh function would be traced and compiled again each time."""
    import jax
    import jax.numpy as jnp

    # Donated: the output takes the input's pages, so no pass touches fresh memory.
    return jax.jit(jnp.matmul), jax.jit(_add_one, donate_argnums=0)


def _add_one(x: Any) -> Any:
    return x + 1.0


# --------------------------------------------------------------------------------------------
# Counts


@dataclasses.dataclass(frozen=True)
class SystemShape:
    """The sizes of a `models.DiscreteSystem` that its FLOP count depends on.

    Attributes:
        structure: ``"mimo"`` or ``"bank"`` (see `models._system`).
        d_model: H, channels.
        states: P, complex states of one direction (H * N for a bank).
        bidirectional: whether a reverse scan runs too.
        conj_sym: whether the output is ``2 Re`` (one more multiply per output).
    """

    structure: Literal["mimo", "bank"]
    d_model: int
    states: int
    bidirectional: bool = False
    conj_sym: bool = False

    def __post_init__(self):
        if self.structure not in ("mimo", "bank"):
            raise ValueError(
                f"SystemShape.structure={self.structure!r}; accepted values: ['mimo', 'bank']."
            )
        for name in ("d_model", "states"):
            value = getattr(self, name)
            validation.positive_int(f"SystemShape.{name}", value)
        if self.structure == "bank" and self.states % self.d_model:
            raise ValueError(
                f"A bank's states ({self.states}) must be a multiple of d_model ({self.d_model})."
            )

    @classmethod
    def of(cls, system: Any) -> SystemShape:
        """The shape of a `models.DiscreteSystem` (concrete or from `equinox.filter_eval_shape`)."""
        return cls(
            structure=system.structure,
            d_model=int(system.D.shape[0]),
            states=int(math.prod(system.lam.shape)),
            bidirectional=system.C_reverse is not None,
            conj_sym=bool(system.conj_sym),
        )


@dataclasses.dataclass(frozen=True)
class Counts:
    """FLOPs and bytes of one computation, and where they come from."""

    flops: float
    bytes: float
    source: str


def forward_flops(shape: SystemShape, length: int) -> dict[str, float]:
    """Model FLOPs of the forward pass on one sequence of ``length`` steps, by part.

    With H channels, P states, d directions (1 or 2), L steps, and real inputs and outputs:

        MIMO  input  b_t = B u_t, two real matmuls (Re B, Im B) ............ 2 * 2 L H P
              scan   h_t = lam h_{t-1} + b_t, per direction ................. 8 L P
              out    Re(C h_t) = Re C Re h - Im C Im h, per direction ......... 2 * 2 L P H + L H
        bank  input  b_{t,h,n} = B_{h,n} u_{t,h}, complex times real ........ 2 L P
              scan   as above ............................................... 8 L P
              out    sum_n Re(C_{h,n} h_{t,h,n}), per direction .............. 3 L P + L (P - H)
        both  the skip D u_t added (2 L H), the sum of two directions (L H), and the factor 2
              of conjugate symmetry on each direction (L H each).

    The input map is shared by both directions, as in the engine.
    """
    L, H, P = length, shape.d_model, shape.states
    directions = 2 if shape.bidirectional else 1
    if shape.structure == "mimo":
        input_map = 4.0 * L * H * P
        readout = 4.0 * L * P * H + L * H
    else:
        input_map = 2.0 * L * P
        readout = 3.0 * L * P + L * (P - H)
    # Skip (multiply and add), the sum of the directions, and 2 Re applied to each direction.
    small = 2.0 * L * H + (directions - 1) * L * H + (directions * L * H if shape.conj_sym else 0)
    return {
        "input": input_map,
        "scan": directions * SCAN_FLOPS_PER_STATE * float(L * P),
        "readout": directions * readout,
        "pointwise": float(small),
    }


def layer_counts(
    shape: SystemShape,
    *,
    length: int,
    batch: int,
    mode: Mode,
    params: int,
    dtype_bytes: int = 4,
) -> Counts:
    """Model FLOPs and minimum bytes of one batched call of a layer (module docstring).

    Modes (F is `forward_flops` summed, F_in its input map, n = B L H values of one activation,
    p the number of parameters, s the bytes of one value):

        "forward"           y = layer(u)                     F            bytes (2 n + p) s
        "forward_backward"  the VJP with cotangent dy:       3 F          bytes (3 n + 2 p) s
                            gradients w.r.t. parameters
                            and input
        "train"             mean((y - target)^2), grads      3 F - F_in   bytes (2 n + 6 p) s
                            w.r.t. parameters, adam update     + 3 n + 14 p

    The backward pass of a matmul is two matmuls of its size, and of the scan a reverse scan
    plus the lambda gradient (sum_t conj(h_{t-1}) g_t), so backward = 2 F; a training step needs
    no input gradient, which saves one input-map product (F_in). The loss adds a subtract, a
    square and a sum per value (3 n).
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not accepted; accepted values: {list(MODES)}.")
    for name, value in (("length", length), ("batch", batch), ("params", params),
                        ("dtype_bytes", dtype_bytes)):
        validation.positive_int(f"layer_counts: {name}", value)
    parts = forward_flops(shape, length)
    forward = batch * sum(parts.values())
    values = float(batch * length * shape.d_model)
    if mode == "forward":
        flops = forward
        moved = 2 * values + params
    elif mode == "forward_backward":
        flops = 3 * forward
        moved = 3 * values + 2 * params
    else:
        flops = 3 * forward - batch * parts["input"] + 3 * values + ADAM_FLOPS_PER_PARAM * params
        moved = 2 * values + 2 * ADAM_ARRAYS * params
    return Counts(flops=float(flops), bytes=float(moved * dtype_bytes), source="analytic")


def scan_counts(states: int, *, length: int, batch: int, complex_bytes: int = 8) -> Counts:
    """The scan alone, h_t = lam h_{t-1} + b_t over ``batch`` sequences of P ``states``.

    8 real FLOPs per state and step; bytes: b read once and h written once (complex64: 8 bytes
    each), lam read once.
    """
    n = float(batch * length * states)
    return Counts(
        flops=SCAN_FLOPS_PER_STATE * n,
        bytes=(2 * n + states) * complex_bytes,
        source="analytic",
    )


# --------------------------------------------------------------------------------------------
# The bound


@dataclasses.dataclass(frozen=True)
class Bound:
    """The roofline lower bound on a computation's time."""

    seconds: float
    compute_s: float
    memory_s: float

    @property
    def limiter(self) -> Literal["compute", "memory"]:
        """Which roof binds: ``"compute"`` when F / peak_flops >= Q / peak_bandwidth."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


def bound(counts: Counts, peaks: Peaks) -> Bound:
    """t_bound = max(F / peak_flops, Q / peak_bandwidth)."""
    compute = counts.flops / peaks.flops_per_s
    memory = counts.bytes / peaks.bytes_per_s
    return Bound(seconds=max(compute, memory), compute_s=compute, memory_s=memory)


def fraction(measured_s: float, bound_s: float) -> float:
    """The roofline fraction t_bound / t_measured (1 = at the machine's limit)."""
    if not (measured_s > 0 and math.isfinite(measured_s)):
        raise ValueError(f"measured_s must be a positive finite time, got {measured_s!r}.")
    if not (bound_s >= 0 and math.isfinite(bound_s)):
        raise ValueError(f"bound_s must be a finite time >= 0, got {bound_s!r}.")
    return bound_s / measured_s


def roofline_columns(counts: Counts, peaks: Peaks, measured_s: float) -> dict[str, Any]:
    """The flat row columns every timed row carries (counts, peaks, bound, fraction)."""
    b = bound(counts, peaks)
    return {
        "flops": counts.flops,
        "bytes": counts.bytes,
        "count_source": counts.source,
        "arithmetic_intensity": counts.flops / counts.bytes,
        "peak_flops_per_s": peaks.flops_per_s,
        "peak_bytes_per_s": peaks.bytes_per_s,
        "peak_matmul_size": peaks.matmul_size,
        "peak_stream_bytes": peaks.stream_bytes,
        "bound_s": b.seconds,
        "bound_limiter": b.limiter,
        "roofline_fraction": fraction(measured_s, b.seconds),
        "achieved_flops_per_s": counts.flops / measured_s,
        "achieved_bytes_per_s": counts.bytes / measured_s,
    }


# --------------------------------------------------------------------------------------------
# What XLA and the process say


def xla_costs(compiled: Any) -> dict[str, float | None]:
    """XLA's cost analysis of a compiled executable: ``xla_flops``, ``xla_bytes``,
    ``xla_transcendentals`` (None where XLA gives no number).

    XLA counts per HLO operation and element: a complex multiply is one FLOP, and a while
    loop's body (a sequential `lax.scan`) is counted once, not once per step. Reported beside
    our count, not used for the bound.
    """
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else {}
    analysis = analysis or {}

    def get(key: str) -> float | None:
        value = analysis.get(key)
        return None if value is None or value < 0 else float(value)

    return {
        "xla_flops": get("flops"),
        "xla_bytes": get("bytes accessed"),
        "xla_transcendentals": get("transcendentals"),
    }


def allocator() -> str:
    """The process's heap allocator: ``"tcmalloc"``, ``"jemalloc"``, ``"mimalloc"`` (preloaded
    or linked), else ``"glibc"`` on Linux and ``"system"`` elsewhere.

    Read from the libraries mapped into the process (``/proc/self/maps``), which covers both
    ``LD_PRELOAD`` and linking.
    """
    try:
        with open("/proc/self/maps") as maps:
            mapped = maps.read()
    except OSError:
        return "system"
    for name in ("tcmalloc", "jemalloc", "mimalloc"):
        if f"lib{name}" in mapped:
            return name
    return "glibc" if "libc.so" in mapped or "libc-" in mapped else "system"


def environment_columns() -> dict[str, Any]:
    """Row columns describing how the process runs: allocator, XLA flags, backend and device."""
    import jax

    devices = jax.devices()
    return {
        "allocator": allocator(),
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        # glibc's settings: whether freed large buffers are kept (Makefile) or unmapped.
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind if devices else "",
    }
