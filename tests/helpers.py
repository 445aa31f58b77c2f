"""What several test files share: tolerances per dtype, precision and inputs, the float64 loop
references of the four layers (tests/test_references.py runs them all; the equivalence tests use
the RotRNN's and the LRU's), their slow jnp references, a registry that forgets the layers a
test registers, a toy layer module written to a temporary directory (an outside layer, as a user
writes one), the check of stored rows against their study's declared columns, and a synthetic
accuracy store."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import scipy.linalg

from linrnn_bench.models import _registry
from linrnn_bench.models.lru import LRU
from linrnn_bench.models.rotrnn import RotRNN
from linrnn_bench.models.s4d import S4D
from linrnn_bench.models.s5 import S5


# Tolerances by dtype: float32 round-off accumulated over a few thousand steps, float64 tight.
TOL = {
    np.dtype("float32"): dict(rtol=2e-4, atol=2e-5),
    np.dtype("float64"): dict(rtol=1e-10, atol=1e-12),
}


def tol(dtype) -> dict:
    """``rtol`` and ``atol`` for comparing arrays of ``dtype`` (keyword arguments of
    ``np.testing.assert_allclose``)."""
    return TOL[np.dtype(dtype)]


@contextlib.contextmanager
def precision(dtype: str):
    """float64 runs inside ``jax.enable_x64``, so that the engine computes in float64 too."""
    with jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext():
        yield


def cast(tree, dtype: str):
    """``tree`` with every floating array in ``dtype`` (call inside ``precision(dtype)``)."""
    return jax.tree.map(lambda a: jnp.asarray(a, dtype), tree)


def inputs(seed: int, shape: tuple[int, ...], dtype: str = "float32"):
    """White unit-variance inputs from a local numpy generator."""
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def rotation_blocks(angles: np.ndarray) -> np.ndarray:
    """Theta = blockdiag(R(theta_1), ...), R(t) = [[cos t, -sin t], [sin t, cos t]]."""
    n = 2 * len(angles)
    theta = np.zeros((n, n))
    for k, a in enumerate(angles):
        c, s = np.cos(a), np.sin(a)
        theta[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [[c, -s], [s, c]]
    return theta


def dense_parameters(layer: RotRNN) -> dict:
    """The paper's matrices in float64 numpy, straight from the layer's fields."""
    M, angles, B = (np.asarray(a, np.float64) for a in (layer.M, layer.angles, layer.B))
    P = np.stack([scipy.linalg.expm(m - m.T) for m in M])
    A = np.stack([p @ rotation_blocks(a) @ p.T for p, a in zip(P, angles)])
    gamma = np.exp(-np.exp(np.asarray(layer.gamma_loglog, np.float64)))
    if layer.normalise:
        xi = np.sqrt((1 - gamma**2) / np.einsum("hij,hij->h", B, B))
    else:
        xi = np.ones_like(gamma)
    return dict(P=P, A=A, gamma=gamma, xi=xi, B=B)


def dense_reference(layer: RotRNN, u) -> tuple[np.ndarray, np.ndarray]:
    """y (L, H) and the forward states x^h_t (L, heads, N_h), by a float64 loop."""
    p = dense_parameters(layer)
    u = np.asarray(u, np.float64)
    steps = u.shape[0]

    def run(times):
        x = np.zeros(p["B"].shape[:2])
        states = np.zeros((steps, *x.shape))
        for t in times:
            x = p["gamma"][:, None] * np.einsum("hij,hj->hi", p["A"], x)
            x = x + p["xi"][:, None] * (p["B"] @ u[t])
            states[t] = x
        return states

    forward = run(range(steps))
    y = forward.reshape(steps, -1) @ np.asarray(layer.C, np.float64).T
    y = y + np.asarray(layer.D, np.float64) * u
    if layer.C_reverse is not None:
        backward = run(reversed(range(steps)))
        y = y + backward.reshape(steps, -1) @ np.asarray(layer.C_reverse, np.float64).T
    return y, forward


def complex_reference(layer: LRU, u) -> tuple[np.ndarray, np.ndarray]:
    """y (L, H) and the forward states x_k (L, P), by a float64 loop over the paper's equations."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    lam = np.exp(-np.exp(f64(layer.nu_log)) + 1j * np.exp(f64(layer.theta_log)))
    B = f64(layer.B_re) + 1j * f64(layer.B_im)
    gamma = np.ones(B.shape[0]) if layer.gamma_log is None else np.exp(f64(layer.gamma_log))
    u = f64(u)

    def run(times):
        x = np.zeros(B.shape[0], complex)
        states = np.zeros((u.shape[0], B.shape[0]), complex)
        for k in times:
            x = lam * x + gamma * (B @ u[k])
            states[k] = x
        return states

    forward = run(range(u.shape[0]))
    y = (forward @ (f64(layer.C_re) + 1j * f64(layer.C_im)).T).real + f64(layer.D) * u
    if layer.C_reverse_re is not None:
        C_reverse = f64(layer.C_reverse_re) + 1j * f64(layer.C_reverse_im)
        y = y + (run(reversed(range(u.shape[0]))) @ C_reverse.T).real
    return y, forward


def bank_reference(layer: S4D, u) -> tuple[np.ndarray, np.ndarray]:
    """y (L, H) and the forward states (L, H, N/2) of the stored half, by a float64 loop per
    channel and state: x_t = A_bar x_{t-1} + B_bar u_t, y_t = Re(C x_t) + D u_t.

    Independent of `models.s4d`: each channel runs its full N-state complex system (the stored
    half and its conjugates) with output Re, not 2 Re; ZOH is done with the matrix exponential
    of the augmented system (Van Loan), bilinear by hand.
    """
    a = -np.exp(as64(layer.A_real_log)) + 1j * as64(layer.A_imag)
    B = np.ones_like(a) if layer.B_re is None else as64(layer.B_re) + 1j * as64(layer.B_im)
    heads = [(as64(layer.C_re) + 1j * as64(layer.C_im), False)]
    if layer.C_reverse_re is not None:
        heads.append((as64(layer.C_reverse_re) + 1j * as64(layer.C_reverse_im), True))
    Delta = np.exp(as64(layer.Delta_log))
    u = as64(u)
    y = as64(layer.D)[None, :] * u
    states = np.zeros((u.shape[0], *a.shape), complex)
    for h in range(u.shape[1]):
        # The full spectrum of channel h: the stored half and its conjugates.
        a_h, B_h = np.concatenate([a[h], a[h].conj()]), np.concatenate([B[h], B[h].conj()])
        A_bar, B_bar = np.zeros_like(a_h), np.zeros_like(a_h)
        for n in range(a_h.size):
            if layer.discretisation == "zoh":
                E = scipy.linalg.expm(np.array([[a_h[n], B_h[n]], [0.0, 0.0]]) * Delta[h])
                A_bar[n], B_bar[n] = E[0, 0], E[0, 1]
            else:
                A_bar[n] = (1 + Delta[h] * a_h[n] / 2) / (1 - Delta[h] * a_h[n] / 2)
                B_bar[n] = Delta[h] * B_h[n] / (1 - Delta[h] * a_h[n] / 2)
        for C, reverse in heads:
            C_h = np.concatenate([C[h], C[h].conj()])
            x = np.zeros_like(a_h)
            for t in reversed(range(u.shape[0])) if reverse else range(u.shape[0]):
                x = A_bar * x + B_bar * u[t, h]
                y[t, h] += (C_h @ x).real
                if not reverse:
                    states[t, h] = x[: a.shape[1]]
    return y, states


def run_loop(A_bar, B_bar, C, D, u, reverse=False) -> np.ndarray:
    """y_t = Re(C x_t) + D u_t with x_t = A_bar x_{t-1} + B_bar u_t, a plain float64 loop."""
    L = u.shape[0]
    x = np.zeros(A_bar.shape[0], dtype=A_bar.dtype)
    y = np.zeros_like(u)
    for t in reversed(range(L)) if reverse else range(L):
        x = A_bar @ x + B_bar @ u[t]
        y[t] = (C @ x).real + (0.0 if D is None else D * u[t])
    return y


def discretise_by_hand(A, B, method):
    """(A_bar, B_bar) of x' = A x + B u over one unit step (Delta already folded into A, B):
    ZOH by the matrix exponential of the augmented system (Van Loan: expm([[A, B], [0, 0]])
    = [[A_bar, B_bar], [0, I]]), bilinear by solving (I - A/2) A_bar = I + A/2."""
    n, m = B.shape
    if method == "zoh":
        aug = np.zeros((n + m, n + m), dtype=complex)
        aug[:n, :n], aug[:n, n:] = A, B
        E = scipy.linalg.expm(aug)
        return E[:n, :n], E[:n, n:]
    elif method == "bilinear":
        left = np.eye(n) - A / 2
        return np.linalg.solve(left, np.eye(n) + A / 2), np.linalg.solve(left, B)
    raise AssertionError(method)


def diagonal_reference(layer: S5, u) -> tuple[np.ndarray, np.ndarray]:
    """y (L, H) and the forward states (L, P') of the stored spectrum (P' = P/2 under conjugate
    symmetry), by a float64 loop over the diagonal system with per-state timescales.

    Independent of `models.s5`: state p is x' = Lambda_p x + B_p u over Delta_p, i.e. a unit
    step of the system with Lambda Delta and Delta B, discretised by `discretise_by_hand`; a
    conjugate-symmetric system is expanded to its full spectrum with output Re, not 2 Re.
    """
    Lambda = as64(layer.Lambda_re) + 1j * as64(layer.Lambda_im)
    stored = Lambda.size
    Delta = np.exp(as64(layer.Delta_log))
    B = as64(layer.B_re) + 1j * as64(layer.B_im)
    Cs = [as64(layer.C_re) + 1j * as64(layer.C_im)]
    if layer.C_reverse_re is not None:
        Cs.append(as64(layer.C_reverse_re) + 1j * as64(layer.C_reverse_im))
    if layer.conj_sym:  # the full spectrum and output Re: checks the 2 Re shortcut independently
        Lambda, Delta = np.concatenate([Lambda, Lambda.conj()]), np.concatenate([Delta, Delta])
        B = np.concatenate([B, B.conj()])
        Cs = [np.concatenate([C, C.conj()], axis=1) for C in Cs]
    A_bar, B_bar = discretise_by_hand(
        np.diag(Lambda * Delta), Delta[:, None] * B, layer.discretisation
    )
    u = as64(u)
    y = run_loop(A_bar, B_bar, Cs[0], as64(layer.D), u)
    if len(Cs) == 2:
        y += run_loop(A_bar, B_bar, Cs[1], None, u, reverse=True)
    states = np.zeros((u.shape[0], stored), complex)
    x = np.zeros(A_bar.shape[0], complex)
    for t in range(u.shape[0]):
        x = A_bar @ x + B_bar @ u[t]
        states[t] = x[:stored]
    return y, states


def as64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def with_algorithm(layer, template):
    """``layer``'s parameters in ``template``'s structure (its static algorithm field)."""
    return jax.tree_util.tree_unflatten(
        jax.tree_util.tree_structure(template), jax.tree_util.tree_leaves(layer)
    )


# --------------------------------------------------------------------------------------------
# Slow references in jnp, differentiable in the layer's fields (tests/test_references.py)


def dense_jnp(layer: RotRNN, u):
    """The same dense recurrence as a slow jnp scan with A formed explicitly; differentiable."""
    P = jax.scipy.linalg.expm(layer.M - jnp.swapaxes(layer.M, -1, -2))
    c, s = jnp.cos(layer.angles), jnp.sin(layer.angles)
    heads, pairs = c.shape
    # Theta = blockdiag(R(theta_k)): blocks (heads, pairs, 2, 2) placed on the diagonal.
    blocks = jnp.stack([jnp.stack([c, -s], -1), jnp.stack([s, c], -1)], -2)
    eye = jnp.eye(pairs, dtype=c.dtype)[None, :, None, :, None]
    theta = (eye * blocks[:, :, :, None, :]).reshape(heads, 2 * pairs, 2 * pairs)
    A = P @ theta @ jnp.swapaxes(P, -1, -2)
    gamma = jnp.exp(-jnp.exp(layer.gamma_loglog))
    if layer.normalise:
        xi = jnp.sqrt((1 - gamma**2) / jnp.sum(layer.B**2, axis=(1, 2)))
    else:
        xi = jnp.ones_like(gamma)

    def step(x, u_t):
        x = gamma[:, None] * jnp.einsum("hij,hj->hi", A, x) + xi[:, None] * (layer.B @ u_t)
        return x, x.reshape(-1)

    def run(reverse):
        x0 = jnp.zeros(layer.B.shape[:2], layer.B.dtype)
        return jax.lax.scan(step, x0, u, reverse=reverse)[1]

    y = run(False) @ layer.C.T + layer.D[None] * u
    if layer.C_reverse is not None:
        y = y + run(True) @ layer.C_reverse.T
    return y


def complex_jnp(layer: LRU, u):
    """The same recurrence as a slow jnp scan over time, differentiable in the layer's fields."""
    lam = jnp.exp(-jnp.exp(layer.nu_log) + 1j * jnp.exp(layer.theta_log))
    B = layer.B_re + 1j * layer.B_im
    if layer.gamma_log is not None:
        B = jnp.exp(layer.gamma_log)[:, None] * B

    def step(x, u_k):
        x = lam * x + B @ u_k
        return x, x

    def run(reverse):
        return jax.lax.scan(step, jnp.zeros(B.shape[0], B.dtype), u, reverse=reverse)[1]

    y = (run(False) @ (layer.C_re + 1j * layer.C_im).T).real + layer.D[None] * u
    if layer.C_reverse_re is not None:
        C_reverse = layer.C_reverse_re + 1j * layer.C_reverse_im
        y = y + (run(True) @ C_reverse.T).real
    return y


def perturbed_s4d(layer: S4D, key) -> S4D:
    """Random parameters (Re(a) < 0), so that nothing rests on the initial values."""
    k = jr.split(key, 5)
    shape = layer.A_imag.shape
    A_real_log = jr.uniform(k[0], shape, minval=-3.0, maxval=0.5)
    layer = eqx.tree_at(lambda m: m.A_real_log, layer, A_real_log)
    layer = eqx.tree_at(lambda m: m.A_imag, layer, layer.A_imag + jr.normal(k[1], shape))
    Delta_log = jr.uniform(k[2], (shape[0],), minval=-4.0, maxval=-1.0)
    layer = eqx.tree_at(lambda m: m.Delta_log, layer, Delta_log)
    if layer.B_re is not None:
        layer = eqx.tree_at(lambda m: m.B_re, layer, jr.normal(k[3], shape))
        layer = eqx.tree_at(lambda m: m.B_im, layer, jr.normal(k[4], shape))
    return layer


def slow_s4d(layer: S4D, u):
    """The same layer without the engine: K_hl = 2 Re sum_n C B_bar lambda^l, y = K * u + D u."""
    a = -jnp.exp(layer.A_real_log) + 1j * layer.A_imag
    Delta = jnp.exp(layer.Delta_log)[:, None]
    if layer.discretisation == "zoh":
        lam = jnp.exp(a * Delta)
        gain = (lam - 1) / a
    else:
        lam = (1 + a * Delta / 2) / (1 - a * Delta / 2)
        gain = Delta / (1 - a * Delta / 2)
    B_bar = gain if layer.B_re is None else gain * (layer.B_re + 1j * layer.B_im)
    lag = jnp.arange(u.shape[0])[:, None] - jnp.arange(u.shape[0])[None, :]  # t - s
    powers = lam[None, None] ** jnp.abs(lag)[:, :, None, None]  # (t, s, H, N)

    def mix(C, mask):
        masked = jnp.where(mask[:, :, None, None], powers, 0)
        weights = 2 * jnp.sum(masked * (C * B_bar)[None, None], axis=-1).real  # (t, s, H)
        return jnp.einsum("tsh,sh->th", weights, u)

    y = layer.D[None, :] * u + mix(layer.C_re + 1j * layer.C_im, lag >= 0)
    if layer.C_reverse_re is not None:
        y = y + mix(layer.C_reverse_re + 1j * layer.C_reverse_im, lag <= 0)
    return y


def perturbed_s5(layer: S5, key) -> S5:
    """Random parameters (stable: Re(Lambda) < 0), so that nothing rests on the initial values."""
    k = jr.split(key, 4)
    stored = layer.Lambda_re.shape
    decay = jr.uniform(k[0], stored, minval=0.1, maxval=1.0)
    layer = eqx.tree_at(lambda m: m.Lambda_re, layer, -decay)
    layer = eqx.tree_at(lambda m: m.Lambda_im, layer, 3.0 * jr.normal(k[1], stored))
    layer = eqx.tree_at(lambda m: m.B_im, layer, jr.normal(k[2], layer.B_im.shape))
    Delta_log = jr.uniform(k[3], stored, minval=-4.0, maxval=-1.0)
    return eqx.tree_at(lambda m: m.Delta_log, layer, Delta_log)


def slow_s5(layer: S5, u):
    """The same layer without a scan: x_t = sum_{s <= t} lambda^(t-s) B_bar u_s, in jnp."""
    Lambda = layer.Lambda_re + 1j * layer.Lambda_im
    Delta = jnp.exp(layer.Delta_log)
    if layer.discretisation == "zoh":
        lam = jnp.exp(Lambda * Delta)
        gain = (lam - 1) / Lambda
    else:
        lam = (1 + Lambda * Delta / 2) / (1 - Lambda * Delta / 2)
        gain = Delta / (1 - Lambda * Delta / 2)
    b = u @ (gain[:, None] * (layer.B_re + 1j * layer.B_im)).T  # (L, P)
    lag = jnp.arange(u.shape[0])[:, None] - jnp.arange(u.shape[0])[None, :]  # t - s
    causal = (lag >= 0)[:, :, None]
    powers = jnp.where(causal, lam[None, None, :] ** jnp.abs(lag)[:, :, None], 0)
    scale = 2.0 if layer.conj_sym else 1.0
    C = layer.C_re + 1j * layer.C_im
    y = layer.D[None, :] * u + scale * (jnp.einsum("tsp,sp->tp", powers, b) @ C.T).real
    if layer.C_reverse_re is not None:
        C_reverse = layer.C_reverse_re + 1j * layer.C_reverse_im
        anticausal = jnp.transpose(powers, (1, 0, 2))  # lambda^(s-t) for s >= t
        y = y + scale * (jnp.einsum("tsp,sp->tp", anticausal, b) @ C_reverse.T).real
    return y


# A fifth model of ours in miniature: one file, one register line, on the shared engine. Real
# decays lambda_p = sigmoid(decay_p) in (0, 1), B and C real, plain Re readout.
TOY_SOURCE = textwrap.dedent('''
    """A toy diagonal recurrence registered from outside the package."""
    import dataclasses

    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    from linrnn_bench import models


    @dataclasses.dataclass(frozen=True)
    class ToyConfig:
        d_model: int
        d_state: int
        algorithm: str = "auto"


    @models.register(
        "toy", ToyConfig, label="Toy",
        paper_size=models.PaperSize(8, 8, (), "no paper: a test's toy"),
    )
    class Toy(models.AbstractRecurrentLayer):
        decay: jax.Array
        B: jax.Array
        C: jax.Array
        D: jax.Array
        algorithm: str = eqx.field(static=True)

        def __init__(self, config, *, key):
            k_decay, k_b, k_c = jr.split(key, 3)
            self.decay = jr.uniform(k_decay, (config.d_state,), minval=1.0, maxval=4.0)
            self.B = jr.normal(k_b, (config.d_state, config.d_model)) / config.d_model**0.5
            self.C = jr.normal(k_c, (config.d_model, config.d_state)) / config.d_state**0.5
            self.D = jnp.zeros((config.d_model,))
            self.algorithm = config.algorithm

        def discrete_system(self):
            return models.DiscreteSystem(
                lam=jax.nn.sigmoid(self.decay).astype(jnp.complex64),
                B=self.B.astype(jnp.complex64), C=self.C.astype(jnp.complex64), D=self.D,
            )

        def recurrent_mask(self):
            mask = jax.tree.map(lambda _: False, self)
            return eqx.tree_at(lambda m: m.decay, mask, True)


    def _broken(config, *, key):
        return lambda u: u[:, :1]  # drops channels: not (L, H) -> (L, H), not a Module


    models.register("broken", ToyConfig, label="Broken")(_broken)
''')


@contextlib.contextmanager
def isolated_registry(*outside_modules: str) -> Iterator[None]:
    """Inside: register freely. After: the registry and the resolved import paths are as
    before, and ``outside_modules`` are forgotten (imported again, they register again)."""
    _registry._load_all()
    registry, paths = dict(_registry._REGISTRY), dict(_registry._PATHS)
    try:
        yield
    finally:
        _registry._REGISTRY.clear()
        _registry._REGISTRY.update(registry)
        _registry._PATHS.clear()
        _registry._PATHS.update(paths)
        for name in outside_modules:
            sys.modules.pop(name, None)


@contextlib.contextmanager
def builtin_models_only() -> Iterator[None]:
    """Inside: only our own layers are registered, as in a fresh process (a report lists every
    registered layer a study leaves out, so a layer another test of this process registered
    would otherwise appear in it). After: the registry as before."""
    with isolated_registry():
        outside = {name for name, info in _registry._REGISTRY.items()
                   if info.origin != _registry.BUILTIN}
        for name in outside:
            del _registry._REGISTRY[name]
        for path in [p for p, name in _registry._PATHS.items() if name in outside]:
            del _registry._PATHS[path]
        yield


def write_toy_module(directory: Path, name: str = "toy_layer") -> Path:
    """Write the toy layer module into ``directory`` (put it on ``sys.path``); its path."""
    path = directory / f"{name}.py"
    path.write_text(TOY_SOURCE)
    return path


def assert_rows_declared(store, study: str, schema) -> set[str]:
    """Every metric row that the runs of ``study`` stored (any status) has exactly the columns
    its kind declares in ``schema`` (the study module's ``COLUMNS``, a
    `harness.studies._schema.Schema`), of the declared types; the kinds seen.

    Read from the store's file as JSON (the ``rows`` table of `harness.store`), not through
    `Store.read`, whose frame fills a row's missing columns with NaN.
    """
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        stored = db.execute(
            "SELECT w.data FROM runs r JOIN rows w ON w.run_id = r.run_id WHERE r.study = ?",
            (study,),
        ).fetchall()
    assert stored, f"no rows of study {study!r} in the store"
    kinds, problems = set(), set()
    for (data,) in stored:
        row = json.loads(data)
        kinds.add(row.get(schema.by))
        problems.update(schema.problems(row))
    assert not problems, f"{study}: {sorted(problems)}"
    return kinds


def assert_printable(artifacts) -> None:
    """Every figure among ``artifacts`` passes the figure review's automated checks at its own
    (paper) size (`harness.report._review`, docs/figures.md): no legend or text over data, no
    colliding or clipped text, nothing below 7 pt, no symbol written as code, ticks where the
    data are and in one format, no outlier setting a shared scale; and carries the numbers it
    draws (`assert_figure_data`)."""
    from linrnn_bench.harness.report import Figure, _review

    problems = {a.name: _review.problems(a.figure) for a in artifacts if isinstance(a, Figure)}
    assert problems and not any(problems.values()), problems
    assert_figure_data(artifacts)


def assert_figure_data(artifacts) -> None:
    """Every figure among ``artifacts`` carries its plotted numbers (``Figure.data``, written
    as ``<name>.csv``): a non-empty frame whose numeric columns are never infinite and each
    finite somewhere (NaN marks a mark not drawn, as an interval at n = 1), and in which every
    finite y value of every line drawn in data coordinates is found (reference lines in axes
    coordinates, such as a baseline across the panel, and axes drawn without axis, whose
    coordinates are a layout, are not data; a line set a few points aside on the page,
    `style.dodge`, is)."""
    import pandas as pd

    from linrnn_bench.harness.report import Figure, _review

    figures = [a for a in artifacts if isinstance(a, Figure)]
    assert figures, "no figure among the artifacts"
    for figure in figures:
        data = figure.data
        assert isinstance(data, pd.DataFrame) and not data.empty, f"{figure.name}: no data"
        assert data.columns.is_unique, (figure.name, list(data.columns))
        numeric = data.select_dtypes("number")
        assert not numeric.empty, f"{figure.name}: no numeric column"
        values = numeric.to_numpy(dtype=float, na_value=np.nan)
        assert not np.isinf(values).any(), f"{figure.name}: an infinite value"
        empty = [c for c, ok in zip(numeric.columns, np.isfinite(values).any(axis=0)) if not ok]
        assert not empty, f"{figure.name}: columns without a finite value: {empty}"
        known = np.unique(values[np.isfinite(values)])
        for ax in figure.figure.axes:
            if not ax.get_visible() or not ax.axison:
                continue
            for line in ax.get_lines():
                if not _review.in_data(line.get_transform(), ax):  # dodged lines are data too
                    continue
                y = np.asarray(line.get_ydata(), dtype=float).ravel()
                y = y[np.isfinite(y)]
                at = np.clip(np.searchsorted(known, y), 1, len(known) - 1) if len(known) > 1 \
                    else np.zeros(len(y), dtype=int)
                nearest = np.minimum(np.abs(known[at] - y), np.abs(known[at - 1] - y))
                absent = y[nearest > 1e-9 * np.maximum(np.abs(y), 1e-300)]
                assert absent.size == 0, (
                    f"{figure.name}: panel {ax.get_title()!r} draws {absent[:5].tolist()} "
                    f"(line {line.get_label()!r}), not in its data")


def small_store(root: Path) -> Path:
    """A small valid results store holding one run, ``root/good.sqlite``."""
    from linrnn_bench.harness.store import Store

    path = root / "good.sqlite"
    Store(path).record(run_id="r0", study="accuracy", status="done", config={"seed": 0},
                       config_hash="h", seed=0, provenance={}, rows=[{"x": 1.0}])
    return path


# A synthetic accuracy store (rows written with `Store.record`): the report tests' numbers,
# computed by hand, and the store a killed report renders in tests/test_faults.py.

SYNTHETIC_PROVENANCE = {
    "git_commit": "0123456789abcdef0123456789abcdef01234567",
    "git_dirty": False,
    "versions": {"jax": "0.10.2", "numpy": "2.4.6"},
    "python": "3.11.9",
    "backend": "cpu",
    "device_kind": "cpu",
    "device_count": 1,
    "cpu_count": 2,
    "settings": {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0", "OPENBLAS_NUM_THREADS": "1",
                 "XLA_FLAGS": "", "LD_PRELOAD": ""},
    "machine": "x86_64",
    "seconds": 1.5,
    "study_version": 1,
}

# Hand-computed case: test accuracies (fractions) per (model, task) over three seeds.
SYNTHETIC_ACCURACY = {
    ("lru", "listops"): (0.30, 0.40, 0.50),  # mean 40.0 %, s = 10, se = 10/sqrt(3) = 5.7735 %
    ("rotrnn", "listops"): (0.45, 0.45, 0.48),  # mean 46.0 %, s = sqrt(3), se = 1.0 %
    ("lru", "digits"): (0.90, 0.92, 0.94),  # mean 92.0 %, s = 2, se = 2/sqrt(3) = 1.1547 %
    ("rotrnn", "digits"): (0.80, 0.85, 0.90),  # mean 85.0 %, s = 5, se = 5/sqrt(3) = 2.8868 %
}


def record_synthetic_accuracy(store) -> None:
    """Write the synthetic accuracy runs into ``store`` (a `harness.store.Store`): three seeds of
    ``SYNTHETIC_ACCURACY``'s (model, task) cells with eval and final rows, a regression task
    selected on loss, and one diverged run. The report tests check their numbers by hand."""
    for (model, task), accs in SYNTHETIC_ACCURACY.items():
        for seed, acc in enumerate(accs):
            rows = [
                {"kind": "eval", "step": step, "val_accuracy": acc * frac, "train_loss": 1.0 / step}
                for step, frac in ((10, 0.5), (20, 0.9), (30, 1.0))
            ]
            rows.append({"kind": "final", "val_accuracy": acc + 0.01, "test_accuracy": acc,
                         "test_loss": 1.0 - acc, "selection": "accuracy", "best_step": 30,
                         "params": 1234, "steps": 30, "train_seconds": 2.0})
            store.record(
                run_id=f"acc-{model}-{task}-{seed}",
                study="accuracy",
                status="done",
                config={"network": {"layer": model, "depth": 2, "d_model": 8, "d_state": 4},
                        "task": task, "train": {"batch_size": 16}, "seed": seed},
                config_hash=f"h-{model}-{task}-{seed}",
                seed=seed,
                provenance=SYNTHETIC_PROVENANCE,
                rows=rows,
            )
    for seed, loss in enumerate((0.25, 0.35)):  # a regression task: selected on loss
        store.record(
            run_id=f"acc-lru-adding-{seed}", study="accuracy", status="done",
            config={"network": {"layer": "lru", "depth": 2}, "task": "adding", "seed": seed},
            config_hash=f"h-add-{seed}",
            seed=seed, provenance=SYNTHETIC_PROVENANCE,
            rows=[{"kind": "final", "val_accuracy": None, "test_accuracy": None,
                   "test_loss": loss, "selection": "loss", "best_step": 30, "params": 99,
                   "steps": 30, "train_seconds": 1.0}],
        )
    store.record(
        run_id="acc-lru-listops-9", study="accuracy", status="diverged",
        config={"network": {"layer": "lru", "depth": 2}, "task": "listops", "seed": 9},
        config_hash="h-div", seed=9,
        provenance=SYNTHETIC_PROVENANCE, rows=[{"kind": "eval", "step": 10, "val_accuracy": 0.1},
                                {"kind": "diverged", "step": 12}],
        error="loss became nan",
    )
