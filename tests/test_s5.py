"""S5 against the paper's dense system in the original basis, and HiPPO-N.

References are independent of `models.s5`: HiPPO-N is built here from its definition, ZOH is
done by the matrix exponential of the augmented system (Van Loan: expm([[A, B], [0, 0]] Delta)
= [[A_bar, B_bar], [0, I]]), bilinear by solving (I - Delta A/2) A_bar = I + Delta A/2, and a
conjugate-symmetric system is expanded to its full spectrum with output Re, not 2 Re
(`discretise_by_hand` and `run_loop` in tests/helpers.py). The output and the states against the
diagonal float64 loop with per-state timescales (`diagonal_reference`) are checked with every
model's in tests/test_references.py.
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.linalg
from helpers import as64, discretise_by_hand, run_loop, tol, with_algorithm

from linrnn_bench import models
from linrnn_bench.models import _hippo
from linrnn_bench.models.s5 import S5, S5Config

F32 = tol(np.float32)
H, P, J, L = 3, 8, 2, 12  # one set of shapes, so compiled code is shared between tests
# (conj_sym, discretisation, bidirectional): every value of each option, and every pair of
# options in both states, in four layer structures.
STRUCTURES = [
    (True, "zoh", True),
    (True, "bilinear", False),
    (False, "zoh", False),
    (False, "bilinear", True),
]


# Jitted once per layer structure: eager calls would retrace the engine's scan every time.
@eqx.filter_jit
def forward(layer, u):
    return layer(u)


def as_complex(re, im) -> np.ndarray:
    return as64(re) + 1j * as64(im)


def hippo_n(N: int) -> np.ndarray:
    """HiPPO-N from its definition, one entry at a time: A_LegS + p p^T, p_n = sqrt(n + 1/2)."""
    S = np.zeros((N, N))
    for n in range(N):
        for k in range(N):
            if n > k:
                A = -math.sqrt(2 * n + 1) * math.sqrt(2 * k + 1)
            elif n == k:
                A = -(n + 1.0)
            else:
                A = 0.0
            S[n, k] = A + math.sqrt(n + 0.5) * math.sqrt(k + 0.5)
    return S


# --------------------------------------------------------------------------------------------
# HiPPO-N


@pytest.mark.parametrize("N", [2, 5, 8])
def test_hippo_n_eigenpairs(N):
    S = hippo_n(N)
    np.testing.assert_allclose(_hippo.normal_matrix(N), S, rtol=1e-14, atol=1e-13)
    eig = np.linalg.eigvals(S)  # general solver, independent of the Hermitian one in _hippo
    np.testing.assert_allclose(eig.real, -0.5, atol=1e-10)
    Lambda, V = _hippo.normal_eigenpairs(N)
    np.testing.assert_allclose(Lambda.real, -0.5, atol=1e-12)
    np.testing.assert_allclose(np.sort(Lambda.imag), np.sort(eig.imag), atol=1e-10)
    np.testing.assert_allclose(V.conj().T @ V, np.eye(N), atol=1e-12)
    np.testing.assert_allclose(S @ V, V * Lambda, atol=1e-10)


@pytest.mark.parametrize("conj_sym", [False, True])
def test_block_hippo_n_tiles_unitary_blocks(conj_sym):
    P, J = 12, 3
    size = P // J
    Lambda, V = _hippo.block_hippo_n(P, J, conj_sym)
    kept = size // 2 if conj_sym else size
    assert Lambda.shape == (J * kept,) and V.shape == (P, J * kept)
    eig = np.linalg.eigvals(hippo_n(size))
    for j in range(J):
        rows, cols = slice(j * size, (j + 1) * size), slice(j * kept, (j + 1) * kept)
        block = V[rows, cols]
        np.testing.assert_allclose(block.conj().T @ block, np.eye(kept), atol=1e-12)
        outside = np.ones(V.shape, bool)
        outside[rows, cols] = False
        assert not np.any(V[rows][outside[rows]])  # block diagonal
        spectrum = Lambda[cols]
        if conj_sym:
            assert np.all(spectrum.imag < 0)
            spectrum = np.concatenate([spectrum, spectrum.conj()])
        np.testing.assert_allclose(np.sort(spectrum.imag), np.sort(eig.imag), atol=1e-10)
    dense = V @ np.diag(Lambda) @ V.conj().T
    dense = 2 * dense.real if conj_sym else dense
    np.testing.assert_allclose(dense, scipy.linalg.block_diag(*[hippo_n(size)] * J), atol=1e-10)


# --------------------------------------------------------------------------------------------
# The layer against the paper's equations


def dense_system(layer: S5, P: int, J: int, conj_sym: bool, C_re, C_im):
    """The real system in the original basis: A = blockdiag(HiPPO-N), B = V B~, C = C~ V^*."""
    _, V = _hippo.block_hippo_n(P, J, conj_sym)
    Bt = as_complex(layer.B_re, layer.B_im)
    Ct = as_complex(C_re, C_im)
    if conj_sym:  # x = V x~ + conj(V x~) over the full spectrum
        return 2 * (V @ Bt).real, 2 * (Ct @ V.conj().T)
    B = V @ Bt
    # B~ was initialised as V^{-1} B with a real B: back in the original basis it is real.
    np.testing.assert_allclose(B.imag, 0.0, atol=1e-6)
    return B.real, Ct @ V.conj().T


@pytest.mark.parametrize("conj_sym,discretisation,bidirectional", STRUCTURES)
def test_matches_dense_system_in_original_basis(getkey, conj_sym, discretisation, bidirectional):
    Delta = 0.05
    config = S5Config(
        H, P, blocks=J, conj_sym=conj_sym, discretisation=discretisation,
        bidirectional=bidirectional, C_init="lecun_normal",
    )
    layer = S5(config, key=getkey())
    # One shared timescale: only then is the dense system a single continuous A discretised.
    shared = jnp.full_like(layer.Delta_log, math.log(Delta))
    layer = eqx.tree_at(lambda m: m.Delta_log, layer, shared)
    A = scipy.linalg.block_diag(*[hippo_n(P // J)] * J)
    B, C = dense_system(layer, P, J, conj_sym, layer.C_re, layer.C_im)
    A_bar, B_bar = discretise_by_hand(A * Delta, B * Delta, discretisation)
    u = np.asarray(jr.normal(getkey(), (L, H)), dtype=np.float64)
    expected = run_loop(A_bar, B_bar, C, as64(layer.D), u)
    if bidirectional:
        _, C_reverse = dense_system(layer, P, J, conj_sym, layer.C_reverse_re, layer.C_reverse_im)
        expected += run_loop(A_bar, B_bar, C_reverse, None, u, reverse=True)
    np.testing.assert_allclose(forward(layer, jnp.asarray(u, jnp.float32)), expected, **F32)


def test_rescaled_multiplies_every_timescale(getkey):
    layer = S5(S5Config(H, P, discretisation="bilinear"), key=getkey())
    doubled = layer.rescaled(2.0)
    np.testing.assert_allclose(np.exp(doubled.Delta_log), 2 * np.exp(layer.Delta_log), rtol=1e-6)
    Lambda = as_complex(layer.Lambda_re, layer.Lambda_im)
    half = Lambda * np.exp(as64(layer.Delta_log))  # (2 Delta) / 2
    np.testing.assert_allclose(doubled.discrete_system().lam, (1 + half) / (1 - half), **F32)
    assert jax.tree_util.tree_structure(doubled) == jax.tree_util.tree_structure(layer)
    for bad in (0.0, -2.0, math.inf):
        with pytest.raises(ValueError, match="timescale factor must be a finite number > 0"):
            layer.rescaled(bad)


def test_recurrent_mask_is_the_official_ssm_group(getkey):
    layer = S5(S5Config(H, P, bidirectional=True), key=getkey())
    mask = layer.recurrent_mask()
    assert jax.tree_util.tree_structure(mask) == jax.tree_util.tree_structure(layer)
    recurrent = {"Lambda_re", "Lambda_im", "B_re", "B_im", "Delta_log"}
    for name in ("Lambda_re", "Lambda_im", "B_re", "B_im", "C_re", "C_im", "C_reverse_re",
                 "C_reverse_im", "D", "Delta_log"):
        assert getattr(mask, name) is (name in recurrent), name


def test_initialisation(getkey):
    config = S5Config(H, P, blocks=J, dt_min=0.01, dt_max=0.02)
    layer = S5(config, key=getkey())
    Lambda, _ = _hippo.block_hippo_n(P, J, True)
    np.testing.assert_allclose(layer.Lambda_re, Lambda.real, **F32)
    np.testing.assert_allclose(layer.Lambda_im, Lambda.imag, **F32)
    Delta = np.exp(as64(layer.Delta_log))
    assert Delta.shape == (P // 2,)
    assert np.all((Delta >= 0.01 * (1 - 1e-6)) & (Delta <= 0.02 * (1 + 1e-6)))
    assert np.all(np.abs(layer.discrete_system().lam) < 1)


def test_clip_eigs_keeps_the_system_stable(getkey):
    config = S5Config(H, P, clip_eigs=True)
    layer = S5(config, key=getkey())
    unstable = eqx.tree_at(lambda m: m.Lambda_re, layer, jnp.full_like(layer.Lambda_re, 0.3))
    assert np.all(np.abs(unstable.discrete_system().lam) < 1)
    template = S5(dataclasses.replace(config, clip_eigs=False), key=getkey())
    unclipped = with_algorithm(unstable, template)
    assert np.all(np.abs(unclipped.discrete_system().lam) > 1)


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(d_state=12, blocks=5), "d_state=12 must be divisible by blocks=5"),
        (dict(d_state=12, blocks=4), "even block size"),
        (dict(C_init="normal"), r"'normal'[\s\S]*'lecun_normal'"),
        (dict(discretisation="euler"), r"'euler'[\s\S]*'bilinear'"),
        (dict(dt_min=0.1, dt_max=0.01), "dt_min=0.1 must not exceed"),
        (dict(dt_min=0.0), "dt_min=0.0 must lie in"),
        (dict(algorithm="convolution"), "algorithm='convolution' is not accepted"),
        (dict(d_model=0), "d_model must be a positive integer"),
    ],
)
def test_bad_config_is_rejected(options, message):
    # Under pytest the jaxtyping hook checks Literal fields before __post_init__ runs, and its
    # TypeError also names the bad value and the accepted ones; elsewhere the ValueError does.
    with pytest.raises((ValueError, TypeError), match=message):
        S5Config(**{"d_model": 2, "d_state": 8, **options})


def test_built_by_the_registry(getkey):
    layer = models.build("s5", d_model=H, d_state=P, key=getkey(), blocks=J, conj_sym=False)
    assert isinstance(layer, S5) and layer.state_size == P
    assert forward(layer, jnp.ones((L, H))).shape == (L, H)
