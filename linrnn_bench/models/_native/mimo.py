"""A MIMO layer's input map, recurrence and readout fused in one C++ call, with its VJP.

For one sequence ``u`` ``(L, H)``, in the planar form of `models._scan` (``B_in = [Re B; Im B]``
``(2P, H)``, ``C_out = s [Re C, -Im C]`` ``(H, 2P)``, ``lam = lam_re + i lam_im``):

    h_t = lam * h_{t-1} + B_in u_t,   y_t = C_out h_t          (``reverse``: h_t from h_{t+1})

the same numbers as `models._engine`'s unfused path (matmul, `models._scan`, matmul) and as
`models._fused.fused_recurrence`, which does this chunk by chunk in XLA. The kernel (`mimo.cc`)
walks each sequence in chunks of 256 steps: the chunk's input map is one OpenBLAS GEMM into a
buffer that stays in cache, the scan runs over it in place, the readout is one GEMM from it. So
no ``(L, 2P)`` buffer is made for the forward pass alone, and a training step saves ``h`` (one
state sequence) and nothing else. The backward pass (``jax.custom_vjp``) walks the chunks against
time and, per chunk, computes the cotangent of ``h`` (``g = dy C_out``), runs the adjoint of
`models._scan`'s docstring over it in place, and applies the four GEMMs of the maps' gradients:

    du = a B_in,  d B_in = sum_t a_t u_t^T,  d C_out = sum_t dy_t h_t^T,  d lam = sum_t a_t h_{t-1}

so its working memory is one chunk's cotangents, not two more state sequences.

Why not XLA: inside an XLA loop a matmul runs on one core and the chunked algorithm in XLA was
slower than the unfused path (`models._fused`); here the threads are over sequences (or blocks
of states when a batch has fewer sequences than cores) and each GEMM is single-threaded.

Batching: `jax.vmap` with ``vmap_method="expand_dims"``: unbatched parameters reach the kernel
once, with size-1 batch dimensions (the kernel reads them with stride 0; ``"broadcast_all"``
copied them per sequence, a third of the working memory left at B = 8, L = 1024); the backward
pass returns one parameter cotangent per sequence (``batch x 4 P H`` numbers), which
`jax.custom_vjp` sums over the batch for unbatched parameters. Forward-mode differentiation and
second derivatives are not supported (the backward pass is a C++ call with no derivative of its
own): use ``algorithm="sequential"``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import NativeUnavailable, status


def mimo_output(
    lam_re: Float[Array, " P"],
    lam_im: Float[Array, " P"],
    B_in: Float[Array, "2*P H"],
    C_out: Float[Array, "H 2*P"],
    u: Float[Array, "L H"],
    *,
    reverse: bool = False,
) -> Float[Array, "L H"]:
    """`models._fused.fused_recurrence` (the same arguments and ``y``, no ``chunk``) in one
    C++ call; float32 or float64.

    Raises:
        NativeUnavailable: the C++ library cannot be built or loaded here (says why).
    """
    current = status()
    if not current.available:
        raise NativeUnavailable(f"the native MIMO kernel cannot run: {current.reason}.")
    states, channels = lam_re.shape[0], u.shape[1]
    shapes_agree = (
        u.ndim == 2 and lam_re.shape == lam_im.shape == (states,)
        and B_in.shape == (2 * states, channels) and C_out.shape == (channels, 2 * states)
    )
    if not shapes_agree:
        raise ValueError(
            f"mimo_output needs lam_re, lam_im (P,), B_in (2P, H), C_out (H, 2P) and u (L, H); "
            f"got {lam_re.shape}, {lam_im.shape}, {B_in.shape}, {C_out.shape} and {u.shape}."
        )
    dtype = jnp.result_type(lam_re, lam_im, B_in, C_out, u)
    if dtype not in (jnp.float32, jnp.float64):
        raise ValueError(
            f"The native MIMO kernel runs float32 and float64; got {dtype}. Cast the inputs, or "
            "use algorithm='sequential'."
        )
    args = (lam_re, lam_im, B_in, C_out, u)
    return _mimo(*(x.astype(dtype) for x in args), bool(reverse))


def _forward_call(lam_re, lam_im, B_in, C_out, u, reverse: bool, save_states: bool):
    length, states = u.shape[0], lam_re.shape[0]
    h_shape = (length, 2, states) if save_states else (0,)
    call = jax.ffi.ffi_call(
        "linrnn_mimo_forward",
        (jax.ShapeDtypeStruct(u.shape, u.dtype), jax.ShapeDtypeStruct(h_shape, u.dtype)),
        vmap_method="expand_dims",
    )
    return call(u, B_in, C_out, lam_re, lam_im, reverse=np.bool_(reverse),
                save_states=np.bool_(save_states))


def _run(lam_re, lam_im, B_in, C_out, u, reverse: bool):
    y, _ = _forward_call(lam_re, lam_im, B_in, C_out, u, reverse, save_states=False)
    return y


_mimo = jax.custom_vjp(_run, nondiff_argnums=(5,))


def _mimo_fwd(lam_re, lam_im, B_in, C_out, u, reverse: bool):
    y, h = _forward_call(lam_re, lam_im, B_in, C_out, u, reverse, save_states=True)
    return y, (lam_re, lam_im, B_in, C_out, u, h)


def _mimo_bwd(reverse: bool, residuals, dy):
    lam_re, lam_im, B_in, C_out, u, h = residuals
    call = jax.ffi.ffi_call(
        "linrnn_mimo_backward",
        (
            jax.ShapeDtypeStruct(u.shape, u.dtype),
            jax.ShapeDtypeStruct(B_in.shape, u.dtype),
            jax.ShapeDtypeStruct(C_out.shape, u.dtype),
            jax.ShapeDtypeStruct(lam_re.shape, u.dtype),
            jax.ShapeDtypeStruct(lam_im.shape, u.dtype),
        ),
        vmap_method="expand_dims",
    )
    du, d_b, d_c, d_re, d_im = call(u, dy.astype(u.dtype), h, B_in, C_out, lam_re, lam_im,
                                     reverse=np.bool_(reverse))
    return d_re, d_im, d_b, d_c, du


_mimo.defvjp(_mimo_fwd, _mimo_bwd)
