"""asv benchmarks of the Flax adapters (`models.flax`): linen and NNX against the Equinox layer.

The same shapes, parameters and inputs as `bench_layers` (`benchmarks.common`: B = 8, H = 128,
float32, L in {1024, 4096}, forward and forward+backward, the VJP w.r.t. parameters and input).
A Flax module holds the layer's parameters and rebuilds the layer on each call, so the goal is
an overhead ratio of 1.00 within noise: the same compiled program. `flax_program` is shared
with the pytest-benchmark suite (benchmarks/pytest/test_flax.py).
"""

from __future__ import annotations

from typing import Any

from . import common

FRONTENDS: tuple[str, ...] = ("linen", "nnx")
_TIMING = dict(number=1, repeat=(3, 7, 30.0), rounds=1, warmup_time=0.0, min_run_count=3)


def flax_program(model: str, length: int, mode: str, frontend: str) -> common.Program:
    """The batched forward, or forward+backward, of `common.layer(model)`'s parameters held by
    the Flax ``frontend`` module ("linen": `models.flax.linen.Layer` applied under `jax.vmap`;
    "nnx": `models.flax.nnx.Layer` split into graph and state), compiled for (B, L, H)."""
    import jax
    from flax import nnx

    from linrnn_bench.harness.measure import timing
    from linrnn_bench.models.flax import linen, to_flax_params
    from linrnn_bench.models.flax import nnx as flax_nnx

    if mode not in common.MODES:
        raise NotImplementedError(f"mode={mode!r} is not benchmarked; accepted: {common.MODES}.")
    layer = common.layer(model)
    d_state = common.BENCHMARKS[model].d_state
    params = to_flax_params(layer)
    if frontend == "linen":
        module = linen.Layer(model=model, d_model=common.D_MODEL, d_state=d_state)

        def forward(p: Any, u: Any) -> Any:
            return jax.vmap(lambda x: module.apply({"params": p}, x))(u)

        state = params
    elif frontend == "nnx":
        holder = flax_nnx.Layer(model, d_model=common.D_MODEL, d_state=d_state,
                                rngs=nnx.Rngs(common.SEED))
        for name, value in params.items():
            getattr(holder, name)[...] = value
        graphdef, state = nnx.split(holder)

        def forward(s: Any, u: Any) -> Any:
            return jax.vmap(nnx.merge(graphdef, s))(u)
    else:
        raise NotImplementedError(f"frontend={frontend!r}; accepted: {list(FRONTENDS)}.")
    u, dy = common.inputs(length)
    if mode == "forward":
        compiled, lower_s, compile_s = timing.compile_timed(forward, state, u)
        return common.Program(compiled, (state, u), lower_s, compile_s)

    def forward_backward(s: Any, u: Any, dy: Any) -> Any:
        return jax.vjp(forward, s, u)[1](dy)

    compiled, lower_s, compile_s = timing.compile_timed(forward_backward, state, u, dy)
    return common.Program(compiled, (state, u, dy), lower_s, compile_s)


def flax_overhead(model: str, length: int, mode: str, frontend: str, *, repeats: int = 5) -> dict:
    """Median times of the Flax module and the Equinox layer, their calls alternating in this
    process (`common._alternate`), and their ratio (1.00: no overhead)."""
    flax_t, layer_t = common._alternate(
        flax_program(model, length, mode, frontend), common.layer_program(model, length, mode),
        repeats,
    )
    return {
        "flax_median_s": flax_t.median_s,
        "layer_median_s": layer_t.median_s,
        "flax_over_layer": flax_t.median_s / layer_t.median_s,
    }


class TimeFlax:
    """Wall time of one batched call through the linen or NNX module (B = 8, H = 128, float32);
    `bench_layers.TimeLayer` times the Equinox layer itself."""

    params = (list(common.MODELS), list(common.LENGTHS), list(common.MODES), list(FRONTENDS))
    param_names = ["model", "seq_len", "mode", "frontend"]
    timeout = 600.0
    version = 1
    number, repeat, rounds = _TIMING["number"], _TIMING["repeat"], _TIMING["rounds"]
    warmup_time, min_run_count = _TIMING["warmup_time"], _TIMING["min_run_count"]

    def setup(self, model, seq_len, mode, frontend):
        common.enable_compilation_cache()
        self.program = flax_program(model, seq_len, mode, frontend)
        self.program.run()

    def time_flax(self, model, seq_len, mode, frontend):
        self.program.run()


class TrackFlaxOverhead:
    """Flax module median time / Equinox layer median time, timed alternately in one process
    (goal 1.00 within noise)."""

    params = (list(common.MODELS), list(common.LENGTHS), list(common.MODES), list(FRONTENDS))
    param_names = ["model", "seq_len", "mode", "frontend"]
    timeout = 900.0
    version = 1
    unit = "x"

    def setup(self, model, seq_len, mode, frontend):
        common.enable_compilation_cache()

    def track_flax_over_layer(self, model, seq_len, mode, frontend):
        return flax_overhead(model, seq_len, mode, frontend)["flax_over_layer"]
