"""The Flax adapters (`models.flax`): parity with the Equinox layers, the drop-ins against the
published codebases' own equations, converters, linen batching, NNX training. The examples of
docs/flax.md run in tests/test_docs.py.

Parity means the same parameters give the same outputs and gradients through the Equinox layer,
the generic linen module, the NNX module and (LRU, S5, RotRNN) the drop-in module: identical
bits in float32 on the same algorithm, <= 1e-12 relative in float64, under jit, grad and vmap.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
import scipy.linalg
from flax import nnx

from linrnn_bench import models
from helpers import cast, inputs, precision, tol
from linrnn_bench.models import flax as mflax
from linrnn_bench.models._hippo import block_hippo_n
from linrnn_bench.models.flax import from_flax_params, linen, to_flax_params
from linrnn_bench.models.flax import nnx as mnnx

# Small shapes: H channels, L steps, a batch of two sequences.
H, L, BATCH = 3, 8, 2
D_STATE = 4
# Every registered layer: a registration brings its Flax parity and round-trip tests.
MODELS = tuple(models.names())


def build(name: str, bidirectional: bool, seed: int = 0, **options):
    return models.build(
        name, d_model=H, d_state=D_STATE, key=jr.PRNGKey(seed), bidirectional=bidirectional,
        **options,
    )


def assert_same(a, b, dtype: str, what: str) -> None:
    """Identical bits in float32; <= 1e-12 relative (to the largest entry) in float64."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype == np.dtype(dtype), what
    if dtype == "float32":
        assert np.array_equal(a, b), f"{what}: max difference {np.abs(a - b).max():.3e}"
    else:
        scale = max(np.abs(b).max(), np.finfo(np.float64).tiny)
        assert np.abs(a - b).max() <= 1e-12 * scale, f"{what}: {np.abs(a - b).max() / scale:.3e}"


def dropin(name: str, config):
    """The published-layout drop-in module for ``config`` (None where there is none)."""
    if name == "lru" and not config.bidirectional:
        return linen.LRU(d_hidden=config.d_state, d_model=config.d_model, r_min=config.r_min,
                         r_max=config.r_max, max_phase=config.max_phase)
    if name == "rotrnn":
        return linen.RotRNN(rotrnn_dim=config.d_state, model_dim=config.d_model,
                            n_heads=config.heads, bidirectional=config.bidirectional)
    if name == "s5":
        Lambda, V = block_hippo_n(config.d_state, 1, True)
        return linen.S5SSM(Lambda_re_init=Lambda.real, Lambda_im_init=Lambda.imag, V=V,
                           Vinv=V.conj().T, H=config.d_model, P=V.shape[1], C_init=config.C_init,
                           discretization="zoh", dt_min=0.001, dt_max=0.1,
                           bidirectional=config.bidirectional)
    return None


def equinox_vjp(layer):
    """(u, dy) -> (y, gradients by field name) of the batched Equinox layer, traceable."""
    params, static = eqx.partition(layer, eqx.is_inexact_array)

    def f(p, u, dy):
        y, vjp = jax.vjp(lambda p: jax.vmap(eqx.combine(p, static))(u), p)
        return y, to_flax_params(vjp(dy)[0])

    return functools.partial(f, params)


def linen_vjp(module, params, u, dy):
    y, vjp = jax.vjp(lambda p: jax.vmap(lambda x: module.apply({"params": p}, x))(u), params)
    return y, vjp(dy)[0]


def nnx_vjp(graphdef, state, u, dy):
    y, vjp = jax.vjp(lambda s: jax.vmap(nnx.merge(graphdef, s))(u), state)
    return y, nnx.to_pure_dict(vjp(dy)[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", MODELS)
def test_parity(name, dtype):
    """Both directions' variants in one jitted program per model and dtype (compilation, not
    arithmetic, is what costs time at these shapes); every parameter is an argument, so no
    implementation's arithmetic is constant-folded."""
    with precision(dtype):
        u = inputs(1, (BATCH, L, H), dtype)
        dy = inputs(2, (BATCH, L, H), dtype)
        cases, layers, states = {}, {}, {}
        for bidirectional in (False, True):
            layer = cast(build(name, bidirectional), dtype)
            config = models.make_config(name, d_model=H, d_state=D_STATE,
                                        bidirectional=bidirectional)
            generic = linen.Layer(model=name, d_model=H, d_state=D_STATE,
                                  options={"bidirectional": bidirectional})
            module = mnnx.Layer(name, d_model=H, d_state=D_STATE, rngs=nnx.Rngs(5),
                                bidirectional=bidirectional)
            for key, value in to_flax_params(layer).items():
                getattr(module, key)[...] = value
            graphdef, states[bidirectional] = nnx.split(module)
            layers[bidirectional] = layer
            cases[bidirectional] = (config, generic, graphdef, dropin(name, config))

        @jax.jit
        def everything(layers, states, u, dy):
            out = {}
            for bidirectional, (config, generic, graphdef, drop) in cases.items():
                layer = layers[bidirectional]
                results = {
                    "equinox": equinox_vjp(layer)(u, dy),
                    "linen": linen_vjp(generic, to_flax_params(layer), u, dy),
                    "nnx": nnx_vjp(graphdef, states[bidirectional], u, dy),
                }
                if drop is not None:
                    published = to_flax_params(layer, layout="published", config=config)
                    y, g = linen_vjp(drop, published, u, dy)
                    ours = from_flax_params(name, g, config, layout="published")
                    results["drop-in"] = (y, to_flax_params(ours))
                out[bidirectional] = results
            return out

        for bidirectional, results in everything(layers, states, u, dy).items():
            y, grads = results.pop("equinox")
            assert len(results) == (2 if name == "s4d" or (name, bidirectional) == ("lru", True)
                                    else 3)
            for kind, (y_k, g_k) in results.items():
                what = f"{kind}, bidirectional={bidirectional}"
                assert set(g_k) == set(grads), what
                assert_same(y_k, y, dtype, f"{what}: output")
                for key in grads:
                    assert_same(g_k[key], grads[key], dtype, f"{what}: gradient of {key}")


# --------------------------------------------------------------------------------------------
# Initialisation


@pytest.mark.parametrize("name", ["lru", "s5"])
def test_linen_init_is_the_layers(name):
    # LRU has correlated fields (its normaliser is a function of its eigenvalues), S5
    # deterministic ones (the HiPPO-N eigenvalues); `lazy_init` compiles the initialisers once
    # and computes no output.
    module = linen.Layer(model=name, d_model=H, d_state=D_STATE)
    u = jax.ShapeDtypeStruct((L, H), jnp.float32)
    params = module.lazy_init(jr.PRNGKey(0), u)["params"]
    other = module.lazy_init(jr.PRNGKey(1), u)["params"]
    assert {k: v.shape for k, v in params.items()} == mflax.field_shapes(name, module.config())
    layer = from_flax_params(name, params, module.config())
    if name == "lru":
        gamma = 0.5 * jnp.log(-jnp.expm1(-2.0 * jnp.exp(layer.nu_log)))
        np.testing.assert_allclose(layer.gamma_log, gamma, rtol=1e-6)
    else:
        np.testing.assert_array_equal(layer.Lambda_im, build(name, False).Lambda_im)
    # Another key is another draw.
    assert any(not np.array_equal(params[k], other[k]) for k in params if params[k].size > 1)


def test_dropin_s5_init_uses_callers_eigenpairs():
    Lambda, V = block_hippo_n(8, 2, True)  # J = 2 blocks, P = 4 kept states
    ssm = linen.init_S5SSM(
        H=H, P=4, Lambda_re_init=Lambda.real, Lambda_im_init=Lambda.imag, V=V, Vinv=V.conj().T,
        C_init="complex_normal", discretization="bilinear", dt_min=0.01, dt_max=0.1,
        conj_sym=True, clip_eigs=False, bidirectional=True,
    )(step_rescale=1.0)
    u = jax.ShapeDtypeStruct((L, H), jnp.float32)
    params = ssm.lazy_init(jr.PRNGKey(0), u)["params"]
    assert {k: v.shape for k, v in params.items()} == {
        "Lambda_re": (4,), "Lambda_im": (4,), "B": (4, H, 2), "C": (H, 8, 2), "D": (H,),
        "log_step": (4, 1)}
    np.testing.assert_array_equal(params["Lambda_im"], Lambda.imag.astype(np.float32))
    assert np.all((params["log_step"] >= math.log(0.01) - 1e-6)
                  & (params["log_step"] <= math.log(0.1) + 1e-6))
    with pytest.raises(ValueError, match="Vinv is not V"):
        linen.S5SSM(Lambda_re_init=Lambda.real, Lambda_im_init=Lambda.imag, V=V, Vinv=V.T * 2,
                    H=H, P=4, C_init="lecun_normal", discretization="zoh", dt_min=0.001,
                    dt_max=0.1).lazy_init(jr.PRNGKey(0), u)


def test_dropin_s5_without_V_takes_it_from_Vinv():
    # The S5 code runs with V=None when C_init="complex_normal" (only B's initialiser needs
    # the eigenvectors, through Vinv): the same draw as with V given.
    Lambda, V = block_hippo_n(8, 2, True)
    common = dict(H=H, P=4, Lambda_re_init=Lambda.real, Lambda_im_init=Lambda.imag,
                  C_init="complex_normal", discretization="zoh", dt_min=0.01, dt_max=0.1)
    u = jax.ShapeDtypeStruct((L, H), jnp.float32)
    with_V = linen.S5SSM(V=V, Vinv=V.conj().T, **common).lazy_init(jr.PRNGKey(3), u)
    without = linen.S5SSM(V=None, Vinv=V.conj().T, **common).lazy_init(jr.PRNGKey(3), u)
    for key, value in with_V["params"].items():
        np.testing.assert_array_equal(without["params"][key], value, err_msg=key)
    with pytest.raises(ValueError, match="pass V .*or at least Vinv"):
        linen.S5SSM(V=None, Vinv=None, **common).lazy_init(jr.PRNGKey(3), u)


def test_published_defaults_read_alike_by_config_and_dropin():
    # minimal-LRU's default r_max = 1: one rule, in LRUConfig, for a config and the drop-in.
    from linrnn_bench.models._validate import MAX_RADIUS

    config = models.make_config("lru", d_model=H, d_state=4, r_min=0.0, r_max=1.0)
    assert config.r_max == MAX_RADIUS == linen.LRU(d_hidden=4, d_model=H).config().r_max
    # Just below 1 is still refused (validated, not clamped).
    with pytest.raises(ValueError, match="too close to 1"):
        models.make_config("lru", d_model=H, d_state=4, r_max=1 - 1e-7)
    # The S5 code's spelling is named in the error.
    with pytest.raises(ValueError, match="'discretization' is spelt 'discretisation' here"):
        models.make_config("s5", d_model=H, d_state=8, discretization="zoh")


# --------------------------------------------------------------------------------------------
# The drop-ins against the published codebases' own equations (float64 loops); parameters
# from an eager build converted to the published layout (the initialisers are tested above)


def minimal_lru_reference(p: dict, u: np.ndarray) -> np.ndarray:
    """minimal-LRU: h_t = lambda h_{t-1} + (B exp(gamma_log)) u_t, y_t = Re(C h_t) + D u_t."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    lam = np.exp(-np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"]))
    B = (p["B_re"] + 1j * p["B_im"]) * np.exp(p["gamma_log"])[:, None]
    C = p["C_re"] + 1j * p["C_im"]
    h = np.zeros(lam.shape, complex)
    y = np.zeros(u.shape)
    for t in range(u.shape[0]):
        h = lam * h + B @ u[t]
        y[t] = (C @ h).real + p["D"] * u[t]
    return y


def s5_reference(p: dict, u: np.ndarray, *, conj_sym, discretization, step_rescale, clip_eigs,
                 bidirectional) -> np.ndarray:
    """The S5 code's apply_ssm: discretise (ZOH or bilinear) with step = step_rescale *
    exp(log_step), scan forward (and backward, states concatenated against [C1, C2] or the one
    C of 2P columns), y = 2 Re(C~ x) under conjugate symmetry (else Re) + D u."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    Lambda_re = np.minimum(p["Lambda_re"], -1e-4) if clip_eigs else p["Lambda_re"]
    Lambda = Lambda_re + 1j * p["Lambda_im"]
    B = p["B"][..., 0] + 1j * p["B"][..., 1]
    step = step_rescale * np.exp(p["log_step"][:, 0])
    if discretization == "zoh":
        lam = np.exp(Lambda * step)
        B_bar = ((lam - 1) / Lambda)[:, None] * B
    else:
        BL = 1 / (1 - step / 2 * Lambda)
        lam = BL * (1 + step / 2 * Lambda)
        B_bar = (BL * step)[:, None] * B
    if "C1" in p:
        C = np.concatenate([p["C1"], p["C2"]], axis=1)
    else:
        C = p["C"]
    C = C[..., 0] + 1j * C[..., 1]
    Bu = u @ B_bar.T
    xs = np.zeros(Bu.shape, complex)
    h = np.zeros(lam.shape, complex)
    for t in range(u.shape[0]):
        h = lam * h + Bu[t]
        xs[t] = h
    if bidirectional:
        back = np.zeros(Bu.shape, complex)
        g = np.zeros(lam.shape, complex)
        for t in reversed(range(u.shape[0])):
            g = lam * g + Bu[t]
            back[t] = g
        xs = np.concatenate([xs, back], axis=1)
    out = (xs @ C.T).real
    return (2 * out if conj_sym else out) + p["D"] * u


def rotrnn_reference(p: dict, u: np.ndarray, bidirectional: bool) -> np.ndarray:
    """The RotRNN authors' module: per head, z = P^T (xi B u) with P = expm(M - M^T) and
    xi = sqrt((1 - gamma^2) / tr(B^T B)); the pairs of z rotate, (z1, z2) -> gamma (cos z1 -
    sin z2, sin z1 + cos z2); x = P z, heads concatenated; y = C x + D u. Bidirectional (the
    published branch does not run): the same recurrence over reversed time, read out by C2."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    heads, Nh, _ = p["B"].shape
    gamma = np.exp(-np.exp(p["gamma_log"][:, 0]))
    xi = np.sqrt((1 - gamma**2) / np.einsum("hij,hij->h", p["B"], p["B"]))
    P = np.stack([scipy.linalg.expm(m - m.T) for m in p["M"]])
    cos, sin = np.cos(p["theta"]), np.sin(p["theta"])

    def states(times):
        x = np.zeros((u.shape[0], heads * Nh))
        z = np.zeros((heads, Nh))
        for t in times:
            drive = np.einsum("hji,hj->hi", P, xi[:, None] * (p["B"] @ u[t]))  # P^T xi B u
            z1, z2 = z[:, 0::2], z[:, 1::2]
            z = np.stack([cos * z1 - sin * z2, sin * z1 + cos * z2], -1).reshape(heads, Nh)
            z = gamma[:, None] * z + drive
            x[t] = np.einsum("hij,hj->hi", P, z).reshape(-1)
        return x

    y = states(range(u.shape[0])) @ p["C"].T + p["D"] * u
    if bidirectional:
        y = y + states(reversed(range(u.shape[0]))) @ p["C2"].T
    return y


def test_dropin_lru_against_minimal_lru_equations():
    with precision("float64"):
        layer = cast(build("lru", False, seed=2, r_min=0.4, r_max=0.99), "float64")
        module = linen.LRU(d_hidden=D_STATE, d_model=H, r_min=0.4, r_max=0.99)
        params = to_flax_params(layer, layout="published")
        u = inputs(3, (L, H), "float64")
        y = jax.jit(module.apply)({"params": params}, u)
        np.testing.assert_allclose(y, minimal_lru_reference(params, np.asarray(u)),
                                   **tol("float64"))


S5_CASES = [
    dict(conj_sym=True, discretization="zoh", step_rescale=1.0, clip_eigs=False,
         bidirectional=False, C_init="trunc_standard_normal"),
    dict(conj_sym=True, discretization="bilinear", step_rescale=2.0, clip_eigs=False,
         bidirectional=True, C_init="lecun_normal"),
    dict(conj_sym=True, discretization="zoh", step_rescale=0.5, clip_eigs=True,
         bidirectional=True, C_init="complex_normal"),
    dict(conj_sym=False, discretization="zoh", step_rescale=1.0, clip_eigs=False,
         bidirectional=False, C_init="lecun_normal"),
]


@pytest.mark.parametrize("case", S5_CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_dropin_s5_against_s5_equations(case):
    with precision("float64"):
        config = models.make_config(
            "s5", d_model=H, d_state=8, blocks=2, conj_sym=case["conj_sym"],
            C_init=case["C_init"], discretisation=case["discretization"], dt_min=0.05,
            dt_max=0.5, clip_eigs=case["clip_eigs"], bidirectional=case["bidirectional"])
        layer = cast(models.from_config("s5", config, key=jr.PRNGKey(3)), "float64")
        params = to_flax_params(layer, layout="published", config=config)
        if case["clip_eigs"]:  # push one eigenvalue over the clip, so that clipping matters
            params = dict(params, Lambda_re=params["Lambda_re"].at[0].set(0.3))
        Lambda, V = block_hippo_n(8, 2, case["conj_sym"])
        module = linen.S5SSM(
            Lambda_re_init=Lambda.real, Lambda_im_init=Lambda.imag, V=V, Vinv=V.conj().T, H=H,
            P=V.shape[1], C_init=case["C_init"], discretization=case["discretization"],
            dt_min=0.05, dt_max=0.5, conj_sym=case["conj_sym"], clip_eigs=case["clip_eigs"],
            bidirectional=case["bidirectional"], step_rescale=case["step_rescale"],
        )
        u = inputs(4, (L, H), "float64")
        y = jax.jit(module.apply)({"params": params}, u)
        expected = s5_reference(params, np.asarray(u), **{k: v for k, v in case.items()
                                                          if k != "C_init"})
        np.testing.assert_allclose(y, expected, **tol("float64"))


@pytest.mark.parametrize("bidirectional", [False, True])
def test_dropin_rotrnn_against_authors_equations(bidirectional):
    with precision("float64"):
        layer = models.build("rotrnn", d_model=H, d_state=8, heads=2, key=jr.PRNGKey(4),
                             bidirectional=bidirectional)
        params = to_flax_params(cast(layer, "float64"), layout="published")
        module = linen.RotRNN(rotrnn_dim=8, model_dim=H, n_heads=2, bidirectional=bidirectional,
                              step_rescale=3.0)  # step_rescale: accepted and ignored
        u = inputs(5, (L, H), "float64")
        y = jax.jit(module.apply)({"params": params}, u)
        np.testing.assert_allclose(y, rotrnn_reference(params, np.asarray(u), bidirectional),
                                   **tol("float64"))


# --------------------------------------------------------------------------------------------
# Converters


LAYOUT_CASES = [(n, b, "ours") for n in MODELS for b in (False, True)] + [
    ("lru", False, "published"), ("rotrnn", False, "published"), ("rotrnn", True, "published"),
    ("s5", False, "published"), ("s5", True, "published"),
]


@pytest.mark.parametrize("name,bidirectional,layout", LAYOUT_CASES)
def test_round_trips_are_exact(name, bidirectional, layout):
    layer = build(name, bidirectional, seed=7)
    config = models.make_config(name, d_model=H, d_state=D_STATE,
                                bidirectional=bidirectional)
    params = to_flax_params(layer, layout=layout, config=config)
    back = from_flax_params(name, params, config, layout=layout)
    leaves, treedef = jax.tree_util.tree_flatten(layer)
    back_leaves, back_treedef = jax.tree_util.tree_flatten(back)
    assert treedef == back_treedef
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(leaves, back_leaves))
    again = to_flax_params(back, layout=layout, config=config)
    assert sorted(again) == sorted(params)
    assert all(np.array_equal(again[k], params[k]) for k in params)


def test_s5_complex_normal_bidirectional_holds_one_C():
    config = models.make_config("s5", d_model=H, d_state=4, bidirectional=True,
                                C_init="complex_normal")
    layer = models.from_config("s5", config, key=jr.PRNGKey(0))
    params = to_flax_params(layer, layout="published", config=config)
    assert params["C"].shape == (H, 4, 2) and "C1" not in params  # 2P columns, P = 2
    np.testing.assert_array_equal(params["C"][:, 2:, 0], layer.C_reverse_re)


def test_an_ours_dict_under_a_renamed_field_still_loads():
    # RotRNN's log(-log gamma) was the field gamma_log before it became gamma_loglog.
    layer = build("rotrnn", False, seed=3)
    config = models.make_config("rotrnn", d_model=H, d_state=D_STATE)
    params = to_flax_params(layer)
    assert "gamma_loglog" in params and "gamma_log" not in params
    old = {("gamma_log" if k == "gamma_loglog" else k): v for k, v in params.items()}
    back = from_flax_params("rotrnn", old, config)
    np.testing.assert_array_equal(back.gamma_loglog, layer.gamma_loglog)
    # Both names at once is ambiguous, and refused.
    with pytest.raises(ValueError, match=r"unexpected \['gamma_log'\]"):
        from_flax_params("rotrnn", {**params, "gamma_log": params["gamma_loglog"]}, config)
    # The published layout keeps the authors' name, gamma_log (heads, 1).
    published = to_flax_params(layer, layout="published")
    np.testing.assert_array_equal(published["gamma_log"][:, 0], layer.gamma_loglog)


def test_converter_errors_name_the_problem():
    layer = build("lru", False)
    config = models.make_config("lru", d_model=H, d_state=4)
    params = to_flax_params(layer)
    with pytest.raises(ValueError, match=r"layout='nope' is not accepted; accepted values"):
        to_flax_params(layer, layout="nope")
    with pytest.raises(ValueError, match=r"missing \['D'\], unexpected \['d'\]"):
        from_flax_params("lru", {**{k: v for k, v in params.items() if k != "D"},
                                 "d": params["D"]}, config)
    with pytest.raises(ValueError, match=r"'B_re' of model 'lru' .* has shape \(3, 4\); its "
                                         r"config needs \(4, 3\)"):
        from_flax_params("lru", {**params, "B_re": params["B_re"].T}, config)
    with pytest.raises(ValueError, match="has no published Flax layout"):
        to_flax_params(build("s4d", False), layout="published")
    with pytest.raises(ValueError, match="has no published Flax layout"):
        from_flax_params("s4d", {}, models.make_config("s4d", d_model=H, d_state=4),
                         layout="published")
    with pytest.raises(ValueError, match="minimal-LRU's layout has the learned normaliser"):
        to_flax_params(build("lru", True), layout="published")
    with pytest.raises(TypeError, match="needs a LRUConfig"):
        from_flax_params("lru", params, models.make_config("s5", d_model=H, d_state=4))
    with pytest.raises(ValueError, match="Unknown model 'nope'; accepted models"):
        linen.Layer(model="nope", d_model=H, d_state=4)
    with pytest.raises(ValueError, match=r"Unknown option\(s\) \['bogus'\]"):
        linen.Layer(model="lru", d_model=H, d_state=4, options={"bogus": 1})
    with pytest.raises(ValueError, match=r"heads=64 does not split d_state=64"):
        linen.RotRNN()  # the authors' defaults: 64 heads of one state dimension each
    with pytest.raises(ValueError, match=r"S5SSM.V has shape"):
        Lambda, V = block_hippo_n(8, 1, True)
        linen.S5SSM(Lambda_re_init=Lambda.real, Lambda_im_init=Lambda.imag, V=V, Vinv=V.conj().T,
                    H=H, P=8, C_init="lecun_normal", discretization="zoh", dt_min=0.001,
                    dt_max=0.1)




def test_converters_take_array_likes_and_refuse_half_precision():
    layer = build("lru", False)
    config = models.make_config("lru", d_model=H, d_state=4)
    params = to_flax_params(layer)
    # Nested lists (a checkpoint read as JSON, say) become the same float32 arrays.
    back = from_flax_params("lru", {k: np.asarray(v).tolist() for k, v in params.items()}, config)
    for k, v in params.items():
        assert getattr(back, k).dtype == v.dtype and np.array_equal(getattr(back, k), v), k
    # Half precision is refused, not cast: the layers' complex maths needs float32 or float64.
    for dtype in (jnp.float16, jnp.bfloat16):
        with pytest.raises(ValueError, match=rf"'nu_log' .* dtype {jnp.dtype(dtype).name}; "
                                             "parameters are real float32 or float64"):
            from_flax_params("lru", {k: v.astype(dtype) for k, v in params.items()}, config)


@pytest.mark.parametrize("C_init", ["complex_normal", "lecun_normal"])
def test_a_bidirectional_s5_is_published_only_with_its_config(C_init):
    # The layer does not keep its C_init, on which the published layout depends (one C or C1
    # and C2): without its config the converter refuses rather than write a layout that the
    # S5 code (and the layer's own config) cannot load.
    config = models.make_config("s5", d_model=H, d_state=4, bidirectional=True, C_init=C_init)
    layer = models.from_config("s5", config, key=jr.PRNGKey(0))
    with pytest.raises(ValueError, match="bidirectional S5's published layout .* pass config="):
        to_flax_params(layer, layout="published")
    with pytest.raises(ValueError, match="config= does not describe this S5 layer"):
        to_flax_params(layer, layout="published",
                       config=models.make_config("s5", d_model=H, d_state=4))
    params = to_flax_params(layer, layout="published", config=config)
    assert ("C" in params) == (C_init == "complex_normal")
    back = from_flax_params("s5", params, config, layout="published")
    assert np.array_equal(back.C_reverse_im, layer.C_reverse_im)
    # Unidirectional: one C whatever C_init, so no config is needed.
    single = build("s5", False)
    assert "C" in to_flax_params(single, layout="published")


# --------------------------------------------------------------------------------------------
# Linen batching with nn.vmap (the published pattern), on the native CPU kernels

# The three native kernels: the bank kernel (S4D "native"), the MIMO scan ("native") and the
# fused MIMO kernel ("fused").
VMAP_CASES = [("s4d", "native"), ("lru", "native"), ("rotrnn", "fused")]


@pytest.mark.parametrize("name,algorithm", VMAP_CASES)
def test_nn_vmap_batches_with_native_kernels(name, algorithm):
    batched = nn.vmap(linen.Layer, in_axes=0, out_axes=0, variable_axes={"params": None},
                      split_rngs={"params": False})
    options = {"algorithm": algorithm, "bidirectional": True}
    module = batched(model=name, d_model=H, d_state=D_STATE, options=options)
    layer = build(name, True, algorithm=algorithm)
    # Traced, not run: the same method, without compiling the discrete system op by op.
    assert eqx.filter_eval_shape(lambda layer: layer.resolved_algorithm(), layer) == algorithm
    u, dy = inputs(6, (BATCH, L, H)), inputs(7, (BATCH, L, H))

    @jax.jit
    def both(layer, u, dy):
        y, vjp = jax.vjp(lambda p: module.apply({"params": p}, u), to_flax_params(layer))
        return (y, vjp(dy)[0]), equinox_vjp(layer)(u, dy)

    (y, grads), (y_eqx, g_eqx) = both(layer, u, dy)
    assert_same(y, y_eqx, "float32", "nn.vmap output")
    for key in g_eqx:
        assert_same(grads[key], g_eqx[key], "float32", f"nn.vmap gradient of {key}")


def test_dropin_lru_in_minimal_lru_batching_pattern():
    # minimal-LRU's BatchClassificationModel pattern, with its defaults r_min=0, r_max=1 (read
    # as the largest radius our LRU accepts in float32: `models.flax.linen.LRU`).
    batched = nn.vmap(linen.LRU, in_axes=0, out_axes=0,
                      variable_axes={"params": None, "dropout": None},
                      split_rngs={"params": False, "dropout": True})
    module = batched(d_hidden=D_STATE, d_model=H)
    from linrnn_bench.models._validate import MAX_RADIUS

    assert linen.LRU(d_hidden=4, d_model=H).config().r_max == MAX_RADIUS
    u = inputs(8, (BATCH, L, H))
    variables = module.lazy_init({"params": jr.PRNGKey(0), "dropout": jr.PRNGKey(1)}, u)
    params = variables["params"]
    assert {k: v.shape for k, v in params.items()} == {
        "nu_log": (4,), "theta_log": (4,), "gamma_log": (4,), "B_re": (4, H), "B_im": (4, H),
        "C_re": (H, 4), "C_im": (H, 4), "D": (H,)}  # one set of parameters for the batch
    assert np.all(np.isfinite(params["nu_log"]))
    y = jax.jit(module.apply)(variables, u)
    config = linen.LRU(d_hidden=4, d_model=H).config()
    layer = from_flax_params("lru", params, config, layout="published")
    expected = eqx.filter_jit(lambda layer, u: jax.vmap(lambda x: layer(x))(u))(layer, u)
    assert_same(y, expected, "float32", "batched drop-in")


# --------------------------------------------------------------------------------------------
# NNX


def test_nnx_state_split_merge_and_training_loop():
    model = mnnx.LRU(H, 4, rngs=nnx.Rngs(0), r_min=0.5, r_max=0.9)
    state = nnx.state(model, nnx.Param)
    assert set(nnx.to_pure_dict(state)) == set(to_flax_params(model.layer()))
    graphdef, full = nnx.split(model)
    merged = nnx.to_pure_dict(nnx.state(nnx.merge(graphdef, full), nnx.Param))
    assert all(merged[k] is v for k, v in nnx.to_pure_dict(state).items())
    u = inputs(9, (BATCH, L, H))
    target = jnp.roll(u, 1, axis=1)  # learn to delay the input by one step

    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    def loss_fn(model):
        return jnp.mean((jax.vmap(model)(u) - target) ** 2)

    @nnx.jit
    def step(model, optimizer):
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    losses = [float(step(model, optimizer)) for _ in range(30)]
    assert losses[-1] < 0.7 * losses[0], losses
    # The gradient nnx.grad gives is the Equinox layer's.
    @nnx.jit
    def both_gradients(model):
        layer_grads = eqx.filter_grad(lambda l: jnp.mean((jax.vmap(l)(u) - target) ** 2))
        return (nnx.to_pure_dict(nnx.grad(loss_fn)(model)),
                to_flax_params(layer_grads(model.layer())))

    grads, expected = both_gradients(model)
    for key in expected:
        np.testing.assert_allclose(grads[key], expected[key], rtol=1e-5, atol=1e-7)


def test_nnx_per_model_classes_and_bridge_cross_check():
    u = inputs(10, (L, H))
    for cls, name in [(mnnx.LRU, "lru"), (mnnx.RotRNN, "rotrnn"), (mnnx.S4D, "s4d"),
                      (mnnx.S5, "s5")]:
        module = cls(H, D_STATE, rngs=nnx.Rngs(1), bidirectional=True)
        assert module.model == name and module.config.bidirectional
        shapes = {k: v.shape for k, v in nnx.to_pure_dict(nnx.state(module, nnx.Param)).items()}
        assert shapes == mflax.field_shapes(name, module.config)
    # flax's own bridge wraps our linen module; with the same params it gives the same output.
    wrapped = nnx.bridge.ToNNX(linen.Layer(model="s5", d_model=H, d_state=4), rngs=nnx.Rngs(0))
    nnx.bridge.lazy_init(wrapped, u)
    params = {k: v[...] for k, v in nnx.state(wrapped, nnx.Param).items()}
    ours = mnnx.S5(H, 4, rngs=nnx.Rngs(3))
    for key, value in params.items():
        getattr(ours, key)[...] = value
    assert_same(nnx.jit(lambda m, u: m(u))(ours, u), nnx.jit(lambda m, u: m(u))(wrapped, u),
                "float32", "bridge")
    with pytest.raises(ValueError, match=r"Unknown option\(s\) \['bogus'\]"):
        mnnx.LRU(H, 4, rngs=nnx.Rngs(0), bogus=1)
