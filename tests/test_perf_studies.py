"""The throughput and memory studies, the roofline arithmetic and the benchmarks' baseline.

No timing is asserted: the smoke runs are checked for their columns and for values that must
hold whatever the machine's speed (positive times, counts equal to the analytic formula, linear
memory); the arithmetic is checked against hand counts and given numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from linrnn_bench import models
from linrnn_bench.harness import programs
from linrnn_bench.harness.measure import memory as measure_memory
from linrnn_bench.harness.measure import roofline, timing
from linrnn_bench.harness.config import ConfigError
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import memory, throughput

from helpers import assert_printable, assert_rows_declared, tol

# Two cheap layers cover both structures (MIMO, sequential scan; bank, FFT convolution).
SMOKE_MODELS = "(s5,s4d)"


# --------------------------------------------------------------------------------------------
# Counts and the bound


def test_forward_flops_hand_count_mimo():
    # H = 2, P = 3, L = 5, one direction, plain Re:
    #   input map  2 real matmuls (5x2)(2x3): 2 * 2*5*2*3         = 120
    #   scan       8 FLOPs per state and step: 8*5*3               = 120
    #   readout    2 real matmuls (5x3)(3x2) and a subtraction:
    #              2 * 2*5*3*2 + 5*2                               = 130
    #   skip       D u_t multiply and add: 2*5*2                   =  20
    shape = roofline.SystemShape("mimo", d_model=2, states=3)
    parts = roofline.forward_flops(shape, 5)
    assert parts == {"input": 120.0, "scan": 120.0, "readout": 130.0, "pointwise": 20.0}
    # forward: B = 1, p = 7 parameters: bytes = (u + y) + p values of 4 bytes = (10 + 10 + 7) * 4
    counts = roofline.layer_counts(shape, length=5, batch=1, mode="forward", params=7)
    assert counts.flops == 390.0 and counts.bytes == 108.0
    # forward_backward: 3 F; bytes (u, dy, du) + 2 p: (30 + 14) * 4
    counts = roofline.layer_counts(shape, length=5, batch=1, mode="forward_backward", params=7)
    assert counts.flops == 1170.0 and counts.bytes == 176.0
    # train at B = 2: 3 F - F_in = 2 * (3 * 390 - 120) = 2100, loss 3 * 20 = 60, adam 14 * 7 = 98;
    # bytes (u, target) = 2 * 20 values + 6 p = 82 values
    counts = roofline.layer_counts(shape, length=5, batch=2, mode="train", params=7)
    assert counts.flops == 2100.0 + 60.0 + 98.0 and counts.bytes == 82 * 4


def test_forward_flops_hand_count_bank_and_bidirectional():
    # Bank: H = 2 channels of N = 3 (P = 6), L = 5, conjugate-symmetric:
    #   input 2*5*6 = 60; scan 8*5*6 = 240; readout 3*5*6 + 5*(6 - 2) = 110;
    #   pointwise: skip 2*5*2 = 20, factor 2 on the one direction 5*2 = 10.
    bank = roofline.SystemShape("bank", d_model=2, states=6, conj_sym=True)
    assert roofline.forward_flops(bank, 5) == {
        "input": 60.0, "scan": 240.0, "readout": 110.0, "pointwise": 30.0
    }
    # MIMO, bidirectional: the input map once, scan and readout twice, the sum of directions.
    both = roofline.SystemShape("mimo", d_model=2, states=3, bidirectional=True)
    assert roofline.forward_flops(both, 5) == {
        "input": 120.0, "scan": 240.0, "readout": 260.0, "pointwise": 30.0
    }


def test_forward_flops_match_xla_on_a_real_arithmetic_layer():
    # The same recurrence written with real arithmetic only, which XLA counts one FLOP per real
    # operation; XLA counts a loop body once, not once per step, so the scan enters its count
    # as one step: 8 P FLOPs per sequence. Everything else must be ours.
    H, P, L, B = 8, 16, 32, 2
    shape = roofline.SystemShape("mimo", d_model=H, states=P)
    rng = np.random.default_rng(0)  # numpy: eager jax.random draws compile per shape
    normal = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    args = (
        normal(P, H), normal(P, H), normal(H, P), normal(H, P),
        jnp.asarray(0.9 * np.cos(rng.uniform(size=P)), jnp.float32),
        jnp.asarray(0.9 * np.sin(rng.uniform(size=P)), jnp.float32),
        normal(H), jnp.ones((B, L, H)),
    )

    def layer(Br, Bi, Cr, Ci, lr, li, D, u):
        def one(u):
            br, bi = u @ Br.T, u @ Bi.T

            def step(h, b):
                hr, hi = h
                new = (lr * hr - li * hi + b[0], lr * hi + li * hr + b[1])
                return new, new

            _, (hr, hi) = jax.lax.scan(step, (jnp.zeros(P), jnp.zeros(P)), (br, bi))
            return hr @ Cr.T - hi @ Ci.T + D[None, :] * u

        return jax.vmap(one)(u)

    compiled = jax.jit(layer).lower(*args).compile()
    xla = roofline.xla_costs(compiled)["xla_flops"]
    ours = roofline.layer_counts(shape, length=L, batch=B, mode="forward", params=1).flops
    scan = roofline.forward_flops(shape, L)["scan"]
    expected = ours - B * scan + B * scan / L
    assert xla is not None
    assert abs(xla - expected) / expected < 0.01, (xla, expected)


def test_xla_costs_of_a_matmul():
    a, b = jnp.ones((16, 32)), jnp.ones((32, 8))
    costs = roofline.xla_costs(jax.jit(jnp.matmul).lower(a, b).compile())
    assert costs["xla_flops"] == 2 * 16 * 32 * 8


def test_bound_from_given_peaks():
    peaks = roofline.Peaks(flops_per_s=1e9, bytes_per_s=1e8, matmul_size=1, stream_bytes=1)
    compute = roofline.bound(roofline.Counts(flops=4e9, bytes=2e8, source="given"), peaks)
    assert (compute.seconds, compute.compute_s, compute.memory_s) == (4.0, 4.0, 2.0)
    assert compute.limiter == "compute"
    memory_bound = roofline.bound(roofline.Counts(flops=1e9, bytes=5e8, source="given"), peaks)
    assert memory_bound.seconds == 5.0 and memory_bound.limiter == "memory"
    assert roofline.fraction(8.0, 4.0) == 0.5
    columns = roofline.roofline_columns(
        roofline.Counts(flops=4e9, bytes=2e8, source="given"), peaks, measured_s=16.0
    )
    assert columns["bound_s"] == 4.0 and columns["roofline_fraction"] == 0.25
    assert columns["achieved_flops_per_s"] == 2.5e8 and columns["arithmetic_intensity"] == 20.0
    best = roofline.Peaks.best(peaks, roofline.Peaks(5e8, 3e8, 2, 2))
    assert (best.flops_per_s, best.bytes_per_s) == (1e9, 3e8)


def test_bad_inputs_are_errors():
    with pytest.raises(ValueError, match="measured_s"):
        roofline.fraction(0.0, 1.0)
    with pytest.raises(ValueError, match="flops_per_s"):
        roofline.Peaks(flops_per_s=0.0, bytes_per_s=1.0, matmul_size=1, stream_bytes=1)
    with pytest.raises(ValueError, match="accepted values"):
        roofline.layer_counts(roofline.SystemShape("mimo", 2, 3), length=5, batch=1,
                              mode="backward", params=1)
    with pytest.raises(ValueError, match="multiple of d_model"):
        roofline.SystemShape("bank", d_model=4, states=6)


def test_timing_statistics():
    times = timing.Timing((4.0, 1.0, 3.0, 2.0))
    assert (times.median_s, times.min_s, times.max_s) == (2.5, 1.0, 4.0)
    assert (times.q25_s, times.q75_s) == (1.75, 3.25)  # numpy's linear interpolation
    assert times.q25_s == np.quantile([4.0, 1.0, 3.0, 2.0], 0.25)
    calls = []
    timed = timing.time_calls(lambda: calls.append(1) or jnp.zeros(()), warmup=2, repeats=3)
    assert len(calls) == 5 and len(timed.times_s) == 3


def test_compile_timed_compiles_and_restores_the_cache_setting():
    before = jax.config.jax_enable_compilation_cache
    compiled, lower_s, compile_s = timing.compile_timed(lambda x: 2.0 * x, jnp.ones(3))
    assert jax.config.jax_enable_compilation_cache == before
    assert lower_s > 0 and compile_s > 0
    np.testing.assert_array_equal(compiled(jnp.ones(3)), np.full(3, 2.0, np.float32))


def test_measured_peaks_are_positive():
    peaks = roofline.measure_peaks(matmul_size=64, stream_mib=1, repeats=1)
    assert peaks.flops_per_s > 0 and peaks.bytes_per_s > 0
    assert peaks.stream_bytes == 2**20 and peaks.matmul_size == 64


# --------------------------------------------------------------------------------------------
# The linear fit


def test_linear_fit_recovers_a_known_slope():
    x = [1024.0, 4096.0, 16384.0, 65536.0]
    fit = measure_memory.fit_linear(x, [1000.0 + 37.0 * v for v in x])
    assert fit.slope == pytest.approx(37.0, rel=1e-12)
    assert fit.intercept == pytest.approx(1000.0, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0) and fit.max_rel_residual < 1e-12
    assert fit.loglog_slope == pytest.approx(1.0, rel=1e-9)
    assert fit.increment_spread < 1e-12
    assert fit.linear(0.05)


def test_linear_fit_rejects_quadratic_growth():
    x = [1024.0, 4096.0, 16384.0, 65536.0]
    fit = measure_memory.fit_linear(x, [5.0 * v * v for v in x])
    assert not fit.linear(0.05)
    assert fit.max_rel_residual > 0.05 and fit.increment_spread > 0.05
    # L log L grows only a little faster than a line, and is still told apart.
    fit = measure_memory.fit_linear(x, [v * math.log(v) for v in x])
    assert not fit.linear(0.05) and fit.superlinear(0.05)
    # A shrinking increment (a fixed cost amortised) is not linear, but not superlinear either.
    fit = measure_memory.fit_linear(x, [math.sqrt(v) + v for v in x])
    assert fit.increment_growth < 0 and not fit.superlinear(0.05)
    with pytest.raises(ValueError, match="two distinct"):
        measure_memory.fit_linear([1.0, 1.0], [2.0, 3.0])


def test_linear_fit_is_least_squares_with_its_r2_on_noisy_data():
    # Noisy points, one x repeated: slope and intercept as numpy's least squares, R^2 from
    # its definition, the residual and increments from theirs.
    x = [1024.0, 4096.0, 4096.0, 16384.0, 65536.0]
    y = [2.1e5, 7.7e5, 7.9e5, 3.1e6, 1.24e7]
    fit = measure_memory.fit_linear(x, y)
    slope, intercept = np.polyfit(x, y, 1)
    assert fit.slope == pytest.approx(slope, rel=1e-10)
    assert fit.intercept == pytest.approx(intercept, rel=1e-8)
    predicted = intercept + slope * np.asarray(x)
    r2 = 1 - np.sum((y - predicted) ** 2) / np.sum((y - np.mean(y)) ** 2)
    assert fit.r2 == pytest.approx(r2, rel=1e-12) and fit.r2 < 1
    assert fit.max_rel_residual == pytest.approx(np.max(np.abs(y - predicted) / y), rel=1e-8)
    increments = [(7.7e5 - 2.1e5) / 3072, (3.1e6 - 7.9e5) / 12288, (1.24e7 - 3.1e6) / 49152]
    assert fit.increment_spread == pytest.approx(np.ptp(increments) / slope, rel=1e-9)
    assert fit.increment_growth == pytest.approx((increments[-1] - increments[0]) / slope,
                                                 rel=1e-9)
    assert fit.loglog_slope == pytest.approx(
        math.log((1.24e7 - intercept) / (2.1e5 - intercept)) / math.log(64), rel=1e-9)
    flat = measure_memory.fit_linear([1.0, 2.0, 3.0], [5.0, 5.0, 5.0])  # on a line: R^2 is 1
    assert (flat.slope, flat.r2, flat.max_rel_residual) == (0.0, 1.0, 0.0)


# --------------------------------------------------------------------------------------------
# Configs


def test_configs_reject_bad_values():
    study = throughput.STUDY
    with pytest.raises(ConfigError, match="accepted values"):
        study.config("smoke", {"modes": "(forward,sideways)"})
    with pytest.raises(ConfigError, match="network"):
        study.config("smoke", {"scopes": "(network,)", "modes": "(forward_backward,)"})
    with pytest.raises(ConfigError, match="max_tokens"):
        study.config("smoke", {"max_tokens": "1"})
    with pytest.raises(ConfigError, match="not accepted"):
        study.config("smoke", {"models": "(lru,gru)"})
    with pytest.raises(ConfigError, match="two distinct lengths"):
        memory.STUDY.config("smoke", {"seq_lens": "(256,)"})
    with pytest.raises(ConfigError, match="isolate"):
        memory.STUDY.config("smoke", {"xla_flags": "--xla_cpu_enable_fast_math=false"})


def test_every_registered_model_has_a_paper_size():
    assert all(models.info(name).paper_size is not None for name in models.names())
    specs = throughput.grid(throughput.STUDY.config("cpu"))
    assert {s.model for s in specs} == set(models.names())
    assert all(s.seq_len * s.batch <= 16384 for s in specs)


def test_matched_size_hits_an_exact_count():
    # The default target is the LRU's count at H = 128, P = 128, so the search must return 128.
    # The search over d_state in [1, 256] (the default limit, 8192, validates 8192 configs,
    # seconds under pytest's run-time type checks; the binary search is the same).
    d_state = programs.matched_d_state("lru", 128, (), programs.DEFAULT_MATCHED_PARAMS,
                                       limit=256)
    assert d_state == 128
    assert programs.parameter_count("lru", d_model=128, d_state=128, options=()) == (
        programs.DEFAULT_MATCHED_PARAMS
    )



# --------------------------------------------------------------------------------------------
# Smoke presets, end to end through the runner and the store


@pytest.fixture(scope="module")
def smoke_store(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("perf") / "store.sqlite")
    # The preset, on two models; memory's training step is the throughput study's program.
    for study, overrides in ((throughput.STUDY, {}), (memory.STUDY, {"modes": "(forward,)"})):
        config = study.config("smoke", {"models": SMOKE_MODELS, **overrides})
        summary = run_study(study, config, store=store, progress=False)
        assert summary.counts == {"done": summary.total}, store.runs(study.name)["error"].tolist()
    return store


def test_throughput_smoke_rows(smoke_store):
    frame = smoke_store.read("throughput")
    specs = throughput.grid(throughput.STUDY.config("smoke", {"models": SMOKE_MODELS}))
    assert len(frame) == len(specs) == 4
    # Every row has exactly the columns the study declares for its scope, of their types.
    assert assert_rows_declared(smoke_store, "throughput", throughput.COLUMNS) == {"layer"}
    assert set(frame["mode"]) == {"forward", "train"}
    assert set(frame["algorithm"]) <= set(models.ALGORITHMS) - {"auto"}  # what ran, resolved
    assert (frame["tokens_per_s"] > 0).all() and (frame["compile_s"] > 0).all()
    assert (frame["time_q25_s"] <= frame["time_median_s"]).all()
    assert (frame["time_median_s"] <= frame["time_q75_s"]).all()
    assert np.isfinite(frame["roofline_fraction"]).all() and (frame["roofline_fraction"] > 0).all()
    np.testing.assert_allclose(
        frame["tokens_per_s"], frame["batch"] * frame["seq_len"] / frame["time_median_s"]
    )
    # The recorded count is the analytic formula for the recorded system, and the parameter
    # count of the built layer (`count_parameters`) is the shape-only one the matched size uses.
    for _, row in frame.iterrows():
        paper = models.info(row["model"]).paper_size
        assert row["params"] == programs.parameter_count(
            row["model"], d_model=int(row["d_model"]), d_state=int(row["d_state"]),
            options=paper.options,
        )
        layer = models.build(row["model"], d_model=int(row["d_model"]),
                             d_state=int(row["d_state"]), key=jax.random.PRNGKey(0),
                             **dict(paper.options))
        system = layer.discrete_system()
        shape = roofline.SystemShape.of(system)
        expected = roofline.layer_counts(shape, length=int(row["seq_len"]), batch=int(row["batch"]),
                                         mode=row["mode"], params=int(row["params"]))
        assert row["flops"] == expected.flops and row["bytes"] == expected.bytes


def test_memory_smoke_rows(smoke_store):
    frame = smoke_store.read("memory")
    points, fits = frame[frame["kind"] == "point"], frame[frame["kind"] == "fit"]
    assert assert_rows_declared(smoke_store, "memory", memory.COLUMNS) == {"point", "fit"}
    assert len(fits) == 2 and len(points) == 4
    assert fits["linear"].astype(bool).all() and not fits["superlinear"].astype(bool).any()
    assert (fits["bytes_per_token"] > 0).all() and (fits["largest_seq_len_in_budget"] > 0).all()
    # The temporaries' slope per token in units of one token's states.
    np.testing.assert_allclose(
        fits["temp_slope_over_state"] * fits["states"] * programs.COMPLEX_BYTES,
        fits["temp_bytes_per_token"],
    )
    np.testing.assert_array_equal(
        points["total_bytes"],
        points["argument_bytes"] + points["output_bytes"] + points["temp_bytes"]
        - points["alias_bytes"],
    )


def test_report_sections(smoke_store):
    from linrnn_bench.harness.report import Figure, Missing, Table
    from linrnn_bench.harness.studies.memory import report as memory_section
    from linrnn_bench.harness.studies.throughput import report as throughput_section

    for module, tables in ((throughput_section, {"throughput_all"}),
                           (memory_section, {"memory_fit", "memory_points"})):
        artifacts = module.section(smoke_store)
        assert_printable(artifacts)
        names = {a.name for a in artifacts if isinstance(a, Table)}
        assert tables <= names
        assert any(isinstance(a, Figure) for a in artifacts)
        assert module.TITLE and module.INTRO
    # L = 64 only: the summary at L = 1024 / 16384 says why it is missing.
    summary = [a for a in throughput_section.section(smoke_store) if a.name == "throughput_summary"]
    assert isinstance(summary[0], Missing) and "1024" in summary[0].reason
    empty = Store(smoke_store.path.parent / "empty.sqlite")
    assert all(isinstance(a, Missing) for a in throughput_section.section(empty))
    assert all(isinstance(a, Missing) for a in memory_section.section(empty))


def test_probe_in_a_fresh_process_matches_in_process():
    probe = memory.Probe("lru", d_model=4, d_state=4, options=(), mode="forward", seq_len=64,
                         batch=1, execute=True, seed=0)
    fresh = memory.probe_in_process(probe)
    here = memory.probe(probe.__class__(**{**probe.__dict__, "execute": False}))
    for key in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes", "total_bytes"):
        assert fresh[key] == here[key]
    assert fresh["device_peak_bytes"] is None  # the CPU reports no device peak
    if Path("/proc/self/clear_refs").exists():
        assert fresh["process_peak_bytes"] is not None and fresh["process_peak_bytes"] >= 0


def test_a_compile_only_program_has_the_memory_of_the_drawn_one():
    # The memory study compiles from shapes alone (`layer_program(abstract=True)`); XLA's
    # buffer assignment must be the drawn inputs' (a training step donates its state).
    layer = models.build("lru", d_model=4, d_state=4, key=jax.random.PRNGKey(0))
    compiled = {}
    for abstract in (False, True):
        function, args, donate, _ = programs.layer_program(
            layer, mode="train", batch=2, seq_len=64, d_model=4, key=jax.random.PRNGKey(1),
            abstract=abstract)
        compiled[abstract] = measure_memory.compiled_memory(
            jax.jit(function, donate_argnums=donate).lower(*args).compile())
    assert compiled[True] == compiled[False]
    assert compiled[True]["alias_bytes"] > 0


# --------------------------------------------------------------------------------------------
# The benchmarks' in-run baseline computes the layers' function


def _random_system(rng, structure: str, *, bidirectional: bool, conj_sym: bool):
    # Drawn with numpy: eager jax.random draws compile one program per shape (seconds).
    H, N = 3, 4
    shape = (N, H) if structure == "mimo" else (H, N)
    out_shape = (H, N)

    def cplx(s):
        return jnp.asarray(rng.standard_normal(s) + 1j * rng.standard_normal(s), jnp.complex64)

    lam_shape = (N,) if structure == "mimo" else (H, N)
    angle = rng.uniform(0.0, 6.0, lam_shape)
    radius = rng.uniform(0.5, 0.95, lam_shape)
    lam = jnp.asarray(radius * np.exp(1j * angle), jnp.complex64)
    return models.DiscreteSystem(
        lam=lam, B=cplx(shape), C=cplx(out_shape), D=jnp.asarray(rng.standard_normal(H),
                                                                 jnp.float32),
        C_reverse=cplx(out_shape) if bidirectional else None, conj_sym=conj_sym,
        structure=structure,
    )


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("conj_sym", [False, True])
def test_reference_scan_matches_the_engine(bidirectional, conj_sym):
    from benchmarks import common

    rng = np.random.default_rng(0)
    system = _random_system(rng, "mimo", bidirectional=bidirectional, conj_sym=conj_sym)
    u = jnp.asarray(rng.standard_normal((50, 3)), jnp.float32)
    expected = jax.jit(models.apply, static_argnames="algorithm")(system, u, algorithm="sequential")
    np.testing.assert_allclose(jax.jit(common.reference_scan_forward)(system, u), expected,
                               **tol(np.float32))


@pytest.mark.parametrize("bidirectional", [False, True])
def test_reference_convolution_matches_the_engine(bidirectional):
    from benchmarks import common

    rng = np.random.default_rng(1)
    system = _random_system(rng, "bank", bidirectional=bidirectional, conj_sym=True)
    u = jnp.asarray(rng.standard_normal((50, 3)), jnp.float32)
    expected = jax.jit(models.apply, static_argnames="algorithm")(system, u, algorithm="sequential")
    np.testing.assert_allclose(jax.jit(common.reference_convolution_forward)(system, u), expected,
                               rtol=1e-3, atol=1e-4)


def test_every_registered_model_has_a_benchmark():
    from benchmarks import common

    assert set(common.MODELS) == set(models.names()) <= set(common.BENCHMARKS)
    assert math.isclose(common.TARGET_SPEEDUP, 5.0)
