"""asv benchmarks of the layers: time, compile time, compiled memory, roofline, speedup.

Every class is parametrised over the registered models (`common.MODELS`); shapes and the
in-run reference are in `benchmarks.common`. `setup` builds and compiles (compilation is never
inside a timed region) and makes one call; timed bodies end in ``jax.block_until_ready``. asv
runs each benchmark in its own process (``launch_method: spawn``: JAX's threads do not survive
a fork), so the project's persistent XLA cache (`common.enable_compilation_cache`) keeps the
processes from compiling the same programs again; compile times are measured with it off.

Process peak memory (``peakmem_``) is not used: it measures the whole Python process, JAX's
runtime included, and cannot tell layers apart; ``track_temp_bytes`` reports XLA's compiled
temporaries instead.
"""

from __future__ import annotations

from . import common

_TIMING = dict(number=1, repeat=(3, 7, 30.0), rounds=1, warmup_time=0.0, min_run_count=3)


def _setup_cache() -> None:
    common.enable_compilation_cache()


class TimeLayer:
    """Wall time of one batched call of the layer (B = 8, H = 128, float32)."""

    params = (list(common.MODELS), list(common.LENGTHS), list(common.MODES))
    param_names = ["model", "seq_len", "mode"]
    timeout = 600.0
    version = 1
    number, repeat, rounds = _TIMING["number"], _TIMING["repeat"], _TIMING["rounds"]
    warmup_time, min_run_count = _TIMING["warmup_time"], _TIMING["min_run_count"]

    algorithm = "auto"

    def setup(self, model, seq_len, mode):
        _setup_cache()
        self.program = common.layer_program(model, seq_len, mode, algorithm=self.algorithm)
        self.program.run()

    def time_layer(self, model, seq_len, mode):
        self.program.run()


class TimeReference:
    """Wall time of the in-run reference (the public implementations' style), same shapes."""

    params = (list(common.MODELS), list(common.LENGTHS), list(common.MODES))
    param_names = ["model", "seq_len", "mode"]
    timeout = 600.0
    version = 1
    number, repeat, rounds = _TIMING["number"], _TIMING["repeat"], _TIMING["rounds"]
    warmup_time, min_run_count = _TIMING["warmup_time"], _TIMING["min_run_count"]

    def setup(self, model, seq_len, mode):
        _setup_cache()
        self.program = common.reference_program(model, seq_len, mode)
        self.program.run()

    def time_reference(self, model, seq_len, mode):
        self.program.run()


class _Cell:
    """One benchmark cell per model, length and mode; each process uses the persistent cache."""

    params = (list(common.MODELS), list(common.LENGTHS), list(common.MODES))
    param_names = ["model", "seq_len", "mode"]
    version = 1

    def setup(self, model, seq_len, mode):
        _setup_cache()


class TrackSpeedup(_Cell):
    """Reference median time / layer median time, timed alternately in one process (target
    `common.TARGET_SPEEDUP`)."""

    timeout = 900.0
    unit = "x"

    def track_speedup_over_reference(self, model, seq_len, mode):
        return common.speedup_over_reference(model, seq_len, mode)["speedup_over_reference"]


class TrackRoofline(_Cell):
    """The layer's roofline fraction: analytic bound from peaks measured in the same process,
    over the median time."""

    timeout = 600.0
    unit = "fraction"

    def track_roofline_fraction(self, model, seq_len, mode):
        return common.roofline_fraction(model, seq_len, mode)["roofline_fraction"]


class TrackSpeedupCeiling(_Cell):
    """The in-run reference's median time over the layer's roofline bound: the in-run ratio of
    an implementation at the roofline, so the ratio `TrackSpeedup` can reach on this machine
    (`common.speedup_ceiling`)."""

    timeout = 900.0
    unit = "x"

    def track_speedup_at_roofline(self, model, seq_len, mode):
        return common.speedup_ceiling(model, seq_len, mode)["speedup_at_roofline"]


class TrackMemory:
    """XLA's compiled memory of forward+backward (no execution): temporaries in bytes and in
    units of one (B, L, P) complex64 state sequence (target: at most one)."""

    params = (list(common.MODELS), list(common.LENGTHS))
    param_names = ["model", "seq_len"]
    timeout = 300.0
    version = 1

    def setup(self, model, seq_len):
        _setup_cache()

    def track_temp_bytes(self, model, seq_len):
        return common.working_memory(model, seq_len)["temp_bytes"]

    track_temp_bytes.unit = "bytes"

    def track_temp_over_state(self, model, seq_len):
        return common.working_memory(model, seq_len)["temp_over_state"]

    track_temp_over_state.unit = "activations"


class TrackActivationMemory:
    """The temporaries of forward+backward that grow with L, in state sequences (the slope of
    `TrackMemory`'s bytes between its two lengths; `common.activation_memory`): the activations a
    training step keeps (target: at most one), without the buffers whose size does not depend
    on L (per-sequence parameter cotangents, a parametrisation's intermediates)."""

    params = (list(common.MODELS),)
    param_names = ["model"]
    timeout = 300.0
    version = 1

    def setup(self, model):
        _setup_cache()

    def track_activations_over_state(self, model):
        return common.activation_memory(model)["activations_over_state"]

    track_activations_over_state.unit = "activations"

    def track_constant_temp_bytes(self, model):
        return common.activation_memory(model)["constant_temp_bytes"]

    track_constant_temp_bytes.unit = "bytes"


class TrackMemoryChunked:
    """`TrackMemory` for the MIMO layers with ``algorithm="chunked"`` (the sequential scan fused
    with the input and output maps; its backward saves only the state entering each chunk)."""

    params = (list(common.CHUNKED_MODELS), list(common.LENGTHS))
    param_names = ["model", "seq_len"]
    timeout = 300.0
    version = 1
    algorithm = "chunked"

    def setup(self, model, seq_len):
        _setup_cache()

    def track_temp_over_state(self, model, seq_len):
        return common.working_memory(model, seq_len, algorithm=self.algorithm)["temp_over_state"]

    track_temp_over_state.unit = "activations"


def _require_native() -> None:
    from linrnn_bench.models import _native

    if not _native.available():  # asv records a skip
        raise NotImplementedError(f"native kernels: {_native.status().reason}")


class TimeLayerUnfused(TimeLayer):
    """`TimeLayer` for the MIMO layers with ``algorithm="native"``: the C++ scan between XLA's
    matmuls, which the default (``"fused"`` on CPU, `models._native.mimo`) replaced; tracked
    beside it, since the two ran at the same speed when the default changed."""

    params = (list(common.CHUNKED_MODELS), list(common.LENGTHS), list(common.MODES))
    algorithm = "native"

    def setup(self, model, seq_len, mode):
        _require_native()
        super().setup(model, seq_len, mode)


class TrackMemoryUnfused(TrackMemoryChunked):
    """`TrackMemory` for the MIMO layers with ``algorithm="native"`` (unfused: its training step
    makes two more state-sized buffers than the default ``"fused"``)."""

    algorithm = "native"

    def setup(self, model, seq_len):
        _require_native()
        super().setup(model, seq_len)


class TrackCompile:
    """Seconds to compile the layer's program with XLA (tracing and lowering excluded), with the
    persistent cache off."""

    params = (list(common.MODELS), list(common.MODES))
    param_names = ["model", "mode"]
    timeout = 300.0
    version = 1
    unit = "seconds"

    def setup(self, model, mode):
        common.disable_compilation_cache()

    def track_compile_seconds(self, model, mode):
        return common.layer_program(model, common.LENGTHS[0], mode).compile_s


class TrackScan:
    """The scan alone at L = 16384 (B = 8, P = 128 complex states, float32): its memory-bound
    roofline (b read once, h written once, at the measured bandwidth) over its median time, for
    the engine's default recurrence as the layers run it (native on CPU, fresh output)."""

    timeout = 600.0
    version = 2  # 2: the engine's default recurrence (native on CPU)
    unit = "fraction"

    def setup(self):
        _setup_cache()

    def track_scan_bandwidth_fraction(self):
        return common.scan_bandwidth_fraction()["roofline_fraction"]


class TrackScanInPlace:
    """The same for the native kernel in place on a donated buffer (`common.scan_program`)."""

    timeout = 600.0
    version = 1
    unit = "fraction"

    def setup(self):
        import jax

        from linrnn_bench.models import _native

        if jax.default_backend() != "cpu" or not _native.available():
            raise NotImplementedError("the in-place variant is the CPU's native kernel")
        _setup_cache()

    def track_scan_in_place_bandwidth_fraction(self):
        return common.scan_bandwidth_fraction(variant="in_place")["roofline_fraction"]
