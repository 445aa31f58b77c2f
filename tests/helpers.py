"""What several test files share: precision and inputs, the float64 loop references of the
RotRNN and the LRU (the equivalence tests use both), a registry that forgets the layers a test
registers, and a toy layer module written to a temporary directory (an outside layer, as a user
writes one)."""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from models import _registry
from models.lru import LRU
from models.rotrnn import RotRNN


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
    gamma = np.exp(-np.exp(np.asarray(layer.gamma_log, np.float64)))
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



# A fifth model of ours in miniature: one file, one register line, on the shared engine. Real
# decays lambda_p = sigmoid(decay_p) in (0, 1), B and C real, plain Re readout.
TOY_SOURCE = textwrap.dedent('''
    """A toy diagonal recurrence registered from outside the package."""
    import dataclasses

    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import models


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


def write_toy_module(directory: Path, name: str = "toy_layer") -> Path:
    """Write the toy layer module into ``directory`` (put it on ``sys.path``); its path."""
    path = directory / f"{name}.py"
    path.write_text(TOY_SOURCE)
    return path
