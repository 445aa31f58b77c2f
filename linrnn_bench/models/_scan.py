"""The diagonal linear recurrence and its hand-written adjoint (private to `models._engine`).

    h_t = lam * h_{t-1} + b_t,   h_{-1} = 0            (forward in time)
    h_t = lam * h_{t+1} + b_t,   h_{L} = 0             (``reverse=True``)

The fast path works on a *planar* real representation: a complex sequence ``(L, P)`` is stored as
``(L, 2, P)`` with the real parts in ``[:, 0]`` and the imaginary parts in ``[:, 1]``, and lambda
as its two real vectors. Then the input map ``B u`` and the output map ``Re(C h)`` are single
real matmuls against ``[Re B; Im B]`` and ``[Re C, -Im C]`` whose results need no conversion,
and no pass over memory is spent assembling or splitting complex numbers. On the project's CPUs
those conversions and their transposes cost more than the scan: forward plus backward of a
layer (B=8, H=P=128, L=1024) took 1.7 times as long with complex states. `linear_scan` offers
the same recurrence on complex arrays.

Three algorithms compute it for one unbatched sequence:

- ``"sequential"``: a loop over time that overwrites ``b`` with ``h`` row by row, in place
  (`lax.fori_loop` with a dynamic update), reading the previous state back from the buffer. On
  CPU it moves each element through memory once, where `lax.scan` also stacks its outputs into
  a fresh buffer and, under `jax.vmap`, transposes the batch axis in and out.
- ``"native"``: the same loop as a C++ kernel called through XLA's FFI (`models._native`), CPU
  only: XLA's loop streams at about a fifth of the memory bandwidth, the kernel at most of it.
- ``"parallel"``: odd-even reduction (the algorithm of `lax.associative_scan`) specialised to a
  time-invariant diagonal system: level ``k`` combines neighbours with ``lam^(2^k)``, a ``(P,)``
  vector obtained by squaring, so lambda is never broadcast over time. O(L) work, O(log L) depth.
  It computes in complex arithmetic between one conversion in and one out.

The reverse-mode derivative is hand-written (`jax.custom_vjp`) and shared by both algorithms,
so the only activation saved for the backward pass is ``h`` itself (O(L P) memory; autodiff
through the in-place loop would be quadratic in L). In the planar form each step is the real
linear map ``h_t = M h_{t-1} + b_t`` with ``M = [[Re lam, -Im lam], [Im lam, Re lam]]``, so
with ``g_t`` the cotangent of ``h_t`` the adjoint ``a_t`` of ``h_t`` is

    a_t = g_t + M^T a_{t+1}              (M^T acts as multiplication by conj(lam))
    grad b_t = a_t
    grad Re lam = sum_{t>=1} Re a_t Re h_{t-1} + Im a_t Im h_{t-1}
    grad Im lam = sum_{t>=1} Im a_t Re h_{t-1} - Re a_t Im h_{t-1}

a reverse-time scan with ``conj(lam)``; for ``reverse=True`` the same with time mirrored. In
JAX's complex convention (cotangent ``dL/dx - i dL/dy``) these are ``grad b_t = a_t`` and
``grad lam = sum_t a_t h_{t-1}`` with ``a_t = g_t + lam a_{t+1}``, no conjugation; the tests
check `linear_scan` against autodiff of a plain complex `lax.scan`. The adjoint scan is this
same differentiable function, so second derivatives also avoid autodiff through the loop;
except for ``"native"``, whose backward pass is one C++ call (the adjoint fused with the
cotangent of lambda, `models._native.planar_adjoint`) with no derivative of its own: take
second derivatives with ``"sequential"``.
Forward-mode differentiation (`jax.jvp`, `jax.jacfwd`) of a `custom_vjp` is not supported.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Complex, Float, Inexact

from . import _native

ScanAlgorithm = Literal["sequential", "native", "parallel"]
SCAN_ALGORITHMS: tuple[str, ...] = ("sequential", "native", "parallel")


def to_planar(z: Inexact[Array, "L P"]) -> Float[Array, "L 2 P"]:
    """(L, P) complex -> (L, 2, P) real: real parts in ``[:, 0]``, imaginary parts in ``[:, 1]``."""
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=1)


def to_complex(x: Float[Array, "L 2 P"]) -> Complex[Array, "L P"]:
    """The inverse of `to_planar`."""
    return lax.complex(x[:, 0], x[:, 1])


def linear_scan(
    lam: Inexact[Array, " P"],
    b: Inexact[Array, "L P"],
    *,
    reverse: bool = False,
    algorithm: str = "sequential",
) -> Complex[Array, "L P"]:
    """h_t = lam * h_{t-1} + b_t with h_{-1} = 0 (or h_t = lam * h_{t+1} + b_t if ``reverse``).

    Differentiable in ``lam`` and ``b`` by the hand-written reverse-mode rule of the module
    docstring, which saves only ``h``; forward-mode differentiation is not supported.

    Arguments:
        lam: the diagonal of the state matrix, ``(P,)``.
        b: the driving sequence, ``(L, P)``.
        reverse: run from the end of the sequence towards its start.
        algorithm: ``"sequential"``, ``"native"`` or ``"parallel"`` (module docstring).

    Returns:
        The states ``h``, ``(L, P)``, complex, in the precision of ``lam`` and ``b``.
    """
    if b.ndim != 2 or lam.shape != b.shape[1:]:
        raise ValueError(
            f"linear_scan needs lam of shape (P,) and b of shape (L, P); got lam "
            f"{tuple(lam.shape)} and b {tuple(b.shape)}."
        )
    real = jnp.finfo(jnp.result_type(lam, b)).dtype  # float32 for complex64, and so on
    h = planar_scan(
        jnp.real(lam).astype(real),
        jnp.imag(lam).astype(real),
        to_planar(b).astype(real),
        reverse=reverse,
        algorithm=algorithm,
    )
    return to_complex(h)


def planar_scan(
    lam_re: Float[Array, " P"],
    lam_im: Float[Array, " P"],
    b: Float[Array, "L 2 P"],
    *,
    reverse: bool = False,
    algorithm: str = "sequential",
) -> Float[Array, "L 2 P"]:
    """`linear_scan` on the planar representation (module docstring): lambda as its real and
    imaginary parts ``(P,)``, ``b`` and the states returned ``(L, 2, P)``."""
    if algorithm not in SCAN_ALGORITHMS:
        raise ValueError(
            f"Unknown scan algorithm {algorithm!r}; accepted values: {SCAN_ALGORITHMS}."
        )
    shapes_agree = b.ndim == 3 and b.shape[1] == 2 and lam_re.shape == lam_im.shape == b.shape[2:]
    if not shapes_agree:
        raise ValueError(
            f"planar_scan needs lam_re and lam_im of shape (P,) and b of shape (L, 2, P); got "
            f"{tuple(lam_re.shape)}, {tuple(lam_im.shape)} and {tuple(b.shape)}."
        )
    # One dtype for all three, so that the custom VJP returns cotangents of the primal dtypes.
    dtype = jnp.result_type(lam_re, lam_im, b)
    return _scan(
        lam_re.astype(dtype), lam_im.astype(dtype), b.astype(dtype), bool(reverse), algorithm
    )


# --------------------------------------------------------------------------------------------
# The two algorithms (primal only: never differentiated by autodiff, see `_scan`)


def _sequential(
    lam_re: Float[Array, " P"],
    lam_im: Float[Array, " P"],
    b: Float[Array, "L 2 P"],
    reverse: bool,
) -> Float[Array, "L 2 P"]:
    length = b.shape[0]
    # lam * h on a planar row (2, P): [Re h, Im h] -> [lr Re h - li Im h, lr Im h + li Re h].
    diagonal = jnp.stack([lam_re, lam_re])
    cross = jnp.stack([-lam_im, lam_im])

    def step(i, buf):
        t = length - 1 - i if reverse else i
        s = t + 1 if reverse else t - 1  # the step whose state feeds h_t
        # buf[t] still holds b_t; rows already visited hold states, so h_s is read back from the
        # buffer (still in cache) rather than carried: the loop body is then one fusion and XLA
        # keeps the update in place (carrying h cost twice the time, reverse thrice).
        previous = lax.dynamic_index_in_dim(buf, jnp.clip(s, 0, length - 1), keepdims=False)
        previous = jnp.where((s >= 0) & (s < length), previous, 0)
        b_t = lax.dynamic_index_in_dim(buf, t, keepdims=False)
        h_t = diagonal * previous + cross * previous[::-1] + b_t
        return lax.dynamic_update_index_in_dim(buf, h_t, t, 0)

    return lax.fori_loop(0, length, step, b)


def _odd_even(lam: Complex[Array, " P"], b: Complex[Array, "n P"]) -> Complex[Array, "n P"]:
    """Inclusive scan by odd-even reduction: h at odd positions from a half-length scan.

    With pairs ``c_k = lam * b_{2k} + b_{2k+1}``, the states at odd positions solve the same
    recurrence with ``lam^2``: ``h_{2k+1} = lam^2 h_{2k-1} + c_k``. The even positions follow
    in one step: ``h_{2k} = lam * h_{2k-1} + b_{2k}``. The recursion depth is log2(n); an odd
    length gets one trailing zero, which changes no earlier state. Pairs are taken by
    reshaping rather than strided slicing, and the arithmetic is complex rather than planar:
    both keep the graph small (planar arithmetic here compiled three times slower at
    L = 65536).
    """
    n = b.shape[0]
    if n == 1:
        return b
    x = jnp.pad(b, ((0, n % 2), (0, 0))).reshape(-1, 2, b.shape[1])
    even_b, odd_b = x[:, 0], x[:, 1]
    odd = _odd_even(lam * lam, lam[None] * even_b + odd_b)
    previous = jnp.concatenate([jnp.zeros_like(odd[:1]), odd[:-1]])
    even = even_b + lam[None] * previous
    return jnp.stack([even, odd], axis=1).reshape(-1, b.shape[1])[:n]


def _parallel(
    lam_re: Float[Array, " P"],
    lam_im: Float[Array, " P"],
    b: Float[Array, "L 2 P"],
    reverse: bool,
) -> Float[Array, "L 2 P"]:
    lam, z = lax.complex(lam_re, lam_im), to_complex(b)
    h = _odd_even(lam, z[::-1])[::-1] if reverse else _odd_even(lam, z)
    return to_planar(h)


def _run(lam_re, lam_im, b, reverse: bool, algorithm: str):
    if algorithm == "sequential":
        return _sequential(lam_re, lam_im, b, reverse)
    elif algorithm == "native":
        return _native.planar_scan(lam_re, lam_im, b, reverse=reverse)
    elif algorithm == "parallel":
        return _parallel(lam_re, lam_im, b, reverse)
    else:
        raise ValueError(
            f"Unknown scan algorithm {algorithm!r}; accepted values: {SCAN_ALGORITHMS}."
        )


# --------------------------------------------------------------------------------------------
# The hand-written backward pass


_scan = jax.custom_vjp(_run, nondiff_argnums=(3, 4))


def _scan_fwd(lam_re, lam_im, b, reverse: bool, algorithm: str):
    h = _run(lam_re, lam_im, b, reverse, algorithm)
    return h, (lam_re, lam_im, h)


def _scan_bwd(reverse: bool, algorithm: str, residuals, g):
    lam_re, lam_im, h = residuals
    if algorithm == "native":
        # The same adjoint and reduction fused in one C++ pass (models._native.planar_adjoint).
        a, grad_re, grad_im = _native.planar_adjoint(lam_re, lam_im, h, g, reverse=reverse)
        return grad_re, grad_im, a
    # The adjoint runs against the direction of time of the primal scan, with M^T = conj(lam).
    a = _scan(lam_re, -lam_im, g, not reverse, algorithm)
    # Pair each a_t with the state it multiplied: h_{t-1} (forward) or h_{t+1} (reverse).
    paired, previous = (a[:-1], h[1:]) if reverse else (a[1:], h[:-1])
    grad_re, grad_im = lambda_cotangent(paired, previous)
    return grad_re, grad_im, a


def lambda_cotangent(
    a: Float[Array, "n 2 P"], previous: Float[Array, "n 2 P"]
) -> tuple[Float[Array, " P"], Float[Array, " P"]]:
    """The cotangents of (Re lam, Im lam) from adjoints ``a_t`` paired with the states
    ``h_{t-1}`` they multiplied, in planar form (module docstring): sum_t a_t h_{t-1}."""
    grad_re = jnp.sum(a[:, 0] * previous[:, 0] + a[:, 1] * previous[:, 1], axis=0)
    grad_im = jnp.sum(a[:, 1] * previous[:, 0] - a[:, 0] * previous[:, 1], axis=0)
    return grad_re, grad_im


_scan.defvjp(_scan_fwd, _scan_bwd)
