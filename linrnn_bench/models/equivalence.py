"""The RotRNN -> LRU equivalence: a multi-head RotRNN is an LRU with conjugate-pair eigenvalues.

The RotRNN paper states that an LRU whose eigenvalues come in conjugate pairs is a multi-head
RotRNN. `rotrnn_to_lru` constructs, for given RotRNN parameters, the LRU that computes the same
function (outputs equal to round-off), and whose state has the same norm.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Complex, Float

from .lru import LRU, LRUConfig
from .rotrnn import RotRNN


def _positive_phase(angle: Float[Array, " P"]) -> Float[Array, " P"]:
    # e^{i a} = e^{i phi} with phi = a mod 2 pi taken in (0, 2 pi]: the LRU stores theta_log =
    # log(theta), so a negative angle -theta becomes 2 pi - theta, and 0 becomes 2 pi.
    phase = jnp.mod(angle, 2 * math.pi)
    return jnp.where(phase == 0, 2 * math.pi, phase)


def _conjugate_pairs(M: Complex[Array, "rows cols"], axis: int) -> Complex[Array, "..."]:
    # [M, conj(M)] / sqrt(2) along ``axis``: the unitary change of basis to [w, conj(w)] / sqrt(2).
    return jnp.concatenate([M, jnp.conj(M)], axis=axis) / math.sqrt(2)


def rotrnn_to_lru(rotrnn: RotRNN) -> LRU:
    """The LRU with conjugate-pair eigenvalues that computes the same function as ``rotrnn``.

    The map. The RotRNN's engine form (`RotRNN.discrete_system`) has, per rotation block k of
    head h, one complex state w_k = z_{2k} + i z_{2k+1} (z = P_h^T x^h) with lambda_k =
    gamma_h e^{i theta_k}, input row b_k = xi_h ((P^T B)[2k] + i (P^T B)[2k+1]) and output
    column c_k, y = Re(C_bar w) + D u. The real dense matrix gamma_h A_h has eigenvalues
    gamma_h e^{+-i theta_k}; the LRU takes both, with states (w, conj(w)) / sqrt(2):

        lambda_LRU = [lambda, conj(lambda)]       (N complex states, conjugate pairs)
        B_LRU      = [B_bar; conj(B_bar)] / sqrt(2)
        C_LRU      = [C_bar, conj(C_bar)] / sqrt(2)
        D_LRU      = D

    Then Re(C_LRU h) = (C_bar w + conj(C_bar w)) / 2 = Re(C_bar w), so the outputs agree, and
    ||h_t||^2 = (||w_t||^2 + ||w_t||^2) / 2 = ||x_t||^2, so the state norms agree too.

    In the LRU's parameters: nu_log = gamma_loglog_h exactly (|lambda| = gamma_h = exp(-exp(
    gamma_loglog_h))); theta_log = log of the phase taken in (0, 2 pi], because the LRU's
    theta = exp(theta_log) is positive: the conjugate -theta_k is stored as 2 pi - theta_k mod
    2 pi (an equivalent representation of the same eigenvalue, exact up to one round-off of
    the angle); the LRU's normaliser exp(gamma_log) is set to 1, the RotRNN's xi_h being
    carried in B_LRU. The LRU is built with d_state = N (the RotRNN's real state dimension),
    the RotRNN's ``bidirectional`` and ``algorithm``; its initialisation options do not apply.

    Arguments:
        rotrnn: a `RotRNN` layer.

    Returns:
        An `LRU` with ``lru(u) == rotrnn(u)`` to round-off and equal state norms.
    """
    system = rotrnn.discrete_system()
    d_model, half = system.D.shape[0], system.state_size
    nu_log = jnp.repeat(rotrnn.gamma_loglog, half // rotrnn.gamma_loglog.shape[0])
    angles = rotrnn.angles.reshape(-1)
    phase = jnp.concatenate([_positive_phase(angles), _positive_phase(-angles)])
    B = _conjugate_pairs(system.B, axis=0)
    C = _conjugate_pairs(system.C, axis=1)
    config = LRUConfig(
        d_model=d_model,
        d_state=2 * half,
        normaliser="learned",
        bidirectional=system.bidirectional,
        algorithm=rotrnn.algorithm,
    )
    # Only the LRU's structure is built (eval_shape initialises nothing); every leaf is set below.
    lru = jax.eval_shape(lambda: LRU(config, key=jr.PRNGKey(0)))
    values = [
        jnp.concatenate([nu_log, nu_log]),
        jnp.log(phase),
        jnp.zeros_like(phase),
        B.real,
        B.imag,
        C.real,
        C.imag,
        system.D,
    ]

    def fields(m: LRU):
        return [m.nu_log, m.theta_log, m.gamma_log, m.B_re, m.B_im, m.C_re, m.C_im, m.D]

    lru = eqx.tree_at(fields, lru, values)
    if system.C_reverse is not None:
        C_reverse = _conjugate_pairs(system.C_reverse, axis=1)
        lru = eqx.tree_at(
            lambda m: (m.C_reverse_re, m.C_reverse_im), lru, (C_reverse.real, C_reverse.imag)
        )
    return lru
