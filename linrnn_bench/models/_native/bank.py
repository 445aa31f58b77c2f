"""A bank of single-input single-output systems (S4D) by a fused C++ recurrence, with its VJP.

For one sequence ``u`` ``(L, H)`` and a bank ``lam, B, C`` ``(H, N)`` complex (channel h's N
states only see ``u[:, h]`` and only feed ``y[:, h]``; see `models._system`):

    h_t[h, n] = lam[h, n] h_{t-1}[h, n] + B[h, n] u_t[h],        h_{-1} = 0
    y_t[h]    = s Re( sum_n C[h, n] h_t[h, n] )                 (s = 2 under conj_sym, else 1)

and with ``reverse=True`` the same run from the end, ``h_t = lam h_{t+1} + B u_t`` (the
reverse direction of a bidirectional layer, with ``C_reverse``). ``D u`` is not included.

The kernel (`bank.cc`) never stores the ``(L, H N)`` states: per sequence and block of
channels it walks time keeping the block's states in registers and writes only ``y``, plus the
state entering every chunk of ``chunk`` steps (``ceil(L / chunk) x 2 H N`` numbers). The
hand-written backward pass (`jax.custom_vjp`) recomputes each chunk's states from that
checkpoint and runs the adjoint of `models._scan`'s docstring against time. Written with
complex numbers, where the cotangent of a complex parameter z is ``dL/dRe z + i dL/dIm z``
(the pair of real cotangents that the planar arrays receive):

    a_t = s conj(C) dy_t + conj(lam) a_{t+1}                (the cotangent of h_t)
    d lam = sum_t a_t conj(h_{t-1}),   d B = sum_t a_t u_t,   d C = s sum_t dy_t conj(h_t)
    du_t = Re sum_n conj(B) a_t

The kernel computes these in an equivalent cheaper form (B folded into the readout, so the
recurrences are driven by the real u and dy; see `bank.cc`). Training therefore saves only
``u``, the parameters and the checkpoints. Forward-mode differentiation is not supported, nor
are second derivatives (the backward pass is a C++ call with no derivative of its own).

Batching: `jax.vmap` with ``vmap_method="broadcast_all"``: under vmap every array of the call
gets the batch dimensions (the ``(6, H, N)`` parameters are broadcast, a copy of
``batch x 6 H N`` numbers, small next to ``u``), and the backward pass returns one parameter
cotangent per sequence, which `jax.custom_vjp` sums over the batch for unbatched parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._system import DiscreteSystem
from . import NativeUnavailable, status

# Steps per chunk: the backward pass recomputes one chunk of a few states' trajectories into a
# buffer (2 x chunk x 2 vectors). 512 was the best or tied in a sweep over 32..1024
# (docs/performance.md). Checkpoint memory is ceil(L / chunk) x 2 H N numbers.
CHUNK = 512


def bank_output(
    system: DiscreteSystem,
    u: Float[Array, "L H"],
    *,
    reverse: bool = False,
    chunk: int = CHUNK,
) -> Float[Array, "L H"]:
    """``s Re(C h_t)`` of a bank on one sequence (``C_reverse`` and time reversed if
    ``reverse``), without ``D u`` (module docstring).

    Arguments:
        system: a ``structure="bank"`` `DiscreteSystem`; ``reverse`` needs ``C_reverse``.
        u: one unbatched input sequence, ``(L, H)``, real.
        reverse: run the recurrence from the end of the sequence, read out with ``C_reverse``.
        chunk: steps between the checkpoints the backward pass recomputes from.

    Returns:
        ``y`` ``(L, H)`` in the promoted real dtype of ``u`` and the system.
    """
    if system.structure != "bank":
        raise ValueError(
            f"bank_output needs a bank of single-input single-output systems (structure='bank'), "
            f"got structure={system.structure!r}."
        )
    C = system.C_reverse if reverse else system.C
    if C is None:
        raise ValueError("bank_output(reverse=True) needs a bidirectional system (C_reverse set).")
    scale = system.output_scale
    return bank_recurrence(
        jnp.real(system.lam), jnp.imag(system.lam), jnp.real(system.B), jnp.imag(system.B),
        scale * jnp.real(C), scale * jnp.imag(C), u, reverse=reverse, chunk=chunk,
    )


def bank_recurrence(
    lam_re: Float[Array, "H N"],
    lam_im: Float[Array, "H N"],
    b_re: Float[Array, "H N"],
    b_im: Float[Array, "H N"],
    c_re: Float[Array, "H N"],
    c_im: Float[Array, "H N"],
    u: Float[Array, "L H"],
    *,
    reverse: bool = False,
    chunk: int = CHUNK,
) -> Float[Array, "L H"]:
    """``y_t = Re(sum_n C h_t)`` with ``h_t = lam h_{t-1} + B u_t`` per channel, planar parts.

    The output scale is the caller's (fold it into ``c_re, c_im``; `bank_output` does).
    Differentiable in every argument by reverse mode (module docstring).

    Raises:
        NativeUnavailable: the C++ library cannot be built or loaded here (says why).
    """
    current = status()
    if not current.available:
        raise NativeUnavailable(f"the native bank kernel cannot run: {current.reason}.")
    if not (isinstance(chunk, int) and chunk > 0):
        raise ValueError(f"bank_recurrence needs a positive integer chunk, got {chunk!r}.")
    parts = (lam_re, lam_im, b_re, b_im, c_re, c_im)
    # One dtype for all, so that the custom VJP returns cotangents of the primal dtypes.
    dtype = jnp.result_type(*parts, u)
    params = jnp.stack([x.astype(dtype) for x in parts])
    return _bank(params, u.astype(dtype), bool(reverse), chunk)


def _forward_call(params, u, reverse: bool, chunk: int):
    """(y, checkpoints) from the C++ forward handler."""
    length, channels = u.shape
    states = params.shape[-1]
    chunks = -(-length // chunk)
    call = jax.ffi.ffi_call(
        "linrnn_bank_forward",
        (
            jax.ShapeDtypeStruct((length, channels), u.dtype),
            jax.ShapeDtypeStruct((chunks, 2, states, channels), u.dtype),
        ),
        vmap_method="broadcast_all",
    )
    return call(params, u, reverse=np.bool_(reverse), chunk=np.int64(chunk))


def _primal(params, u, reverse: bool, chunk: int):
    return _forward_call(params, u, reverse, chunk)[0]


_bank = jax.custom_vjp(_primal, nondiff_argnums=(2, 3))


def _bank_fwd(params, u, reverse: bool, chunk: int):
    y, checkpoints = _forward_call(params, u, reverse, chunk)
    return y, (params, u, checkpoints)


def _bank_bwd(reverse: bool, chunk: int, residuals, dy):
    params, u, checkpoints = residuals
    call = jax.ffi.ffi_call(
        "linrnn_bank_backward",
        (jax.ShapeDtypeStruct(params.shape, params.dtype), jax.ShapeDtypeStruct(u.shape, u.dtype)),
        vmap_method="broadcast_all",
    )
    d_params, du = call(
        params, u, checkpoints, dy.astype(u.dtype), reverse=np.bool_(reverse), chunk=np.int64(chunk)
    )
    return d_params, du


_bank.defvjp(_bank_fwd, _bank_bwd)
