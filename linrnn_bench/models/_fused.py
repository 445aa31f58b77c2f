"""A MIMO layer's recurrence fused with its input and output maps, chunk by chunk, with its VJP.

    b_t = B_in u_t,   h_t = lam * h_{t-1} + b_t,   y_t = C_out h_t      (forward in time)

with ``h`` in the planar real form of `models._scan` (a row ``(2, P)``: real parts, imaginary
parts), ``B_in = [Re B; Im B]`` ``(2P, H)`` and ``C_out = s [Re C, -Im C]`` ``(H, 2P)``, so that
``y_t = s Re(C h_t)``; ``reverse=True`` runs ``h_t = lam * h_{t+1} + b_t`` from the end.

Unfused, a layer writes ``b`` for the whole sequence, scans it in place and reads it back for
the readout: three passes over a ``(L, 2P)`` buffer that is far larger than the cache, and a
training step saves ``h`` (one such buffer) and makes a few more in its backward pass. Here the
sequence is walked in chunks of ``T`` steps: for each chunk, ``b_c = u_c B_in^T`` (``T x 2P``,
stays in cache), the in-place sequential loop of `models._scan` runs over it with the state of
the previous chunk folded into its first row (``b_0 += lam h_in``), and ``y_c = h_c C_out^T``.
Nothing of length ``L`` is made except ``y``.

For training, only the state entering each chunk is saved (``L / T`` rows of ``2P``). The
backward pass walks the chunks against the direction of the primal scan and, per chunk,
recomputes ``b_c`` and ``h_c`` from the saved state (one more small matmul and an in-cache
scan), then runs the adjoint of `models._scan`'s docstring with ``a`` carried across chunks:

    g_c = dy_c C_out                          (the cotangent of h_c)
    a_t = g_t + conj(lam) a_{t+1}             (a_{end} carried from the later chunk)
    grad lam  += sum_t a_t h_{t-1}            (planar pairing; h_{-1} of a chunk = h_in)
    grad B_in += a_c^T u_c,   grad C_out += dy_c^T h_c,   grad u_c = a_c B_in

The reverse direction is the same with time mirrored. Forward-mode differentiation is not
supported (a `jax.custom_vjp`), and second derivatives go through autodiff of the backward
pass's loops (correct, but not memory-lean).

Measured, and why ``algorithm="auto"`` never picks it (`models._engine` runs it only for
``algorithm="chunked"``; 2-core CPU, B = 8, H = 128, float32, interleaved medians in one process):
XLA:CPU runs a matmul inside a loop body on one core (its ``T x 2P`` chunk is too small to be
split), whereas the unfused path's whole-sequence matmuls use both cores. With the native
kernel for the in-chunk loops (`_chunk_scan`) and against the unfused native path, forward
plus backward ran at 0.71-0.76 of its speed at L = 1024 and 0.72-0.97 at L = 4096 across
RotRNN, LRU and S5 (forward 0.76-0.90 at L = 1024). Its compiled working memory for
forward+backward was 0.42-0.56 state sequences at L = 4096 against 3.0-3.1 unfused; at
L = 1024 the per-chunk buffers (and, under `jax.vmap`, one ``(batch, 2P, H)`` gradient
accumulator per parameter) make it 1.7-2.2 (against 3.0-3.4).
`CHUNK` is the compromise of a sweep over 32..1024 (made with the XLA loop in the chunks):
smaller chunks cost more per-chunk overhead, larger ones more memory (above 512, more than one
state sequence at L = 4096).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float

from . import _native
from ._scan import _sequential, lambda_cotangent

# Steps per chunk; see the module docstring for the sweep behind it.
CHUNK = 256


def fused_recurrence(
    lam_re: Float[Array, " P"],
    lam_im: Float[Array, " P"],
    B_in: Float[Array, "2*P H"],
    C_out: Float[Array, "H 2*P"],
    u: Float[Array, "L H"],
    *,
    reverse: bool = False,
    chunk: int = CHUNK,
) -> Float[Array, "L H"]:
    """y_t = C_out h_t with h_t = lam * h_{t-1} + B_in u_t in planar form (module docstring).

    Arguments:
        lam_re, lam_im: the real and imaginary parts of lambda, ``(P,)`` each.
        B_in: the planar input map ``[Re B; Im B]``, ``(2P, H)``.
        C_out: the planar output map ``s [Re C, -Im C]``, ``(H, 2P)``.
        u: one unbatched input sequence, ``(L, H)``.
        reverse: run the recurrence from the end of the sequence towards its start.
        chunk: steps per chunk, a positive integer (a sequence shorter than it is one chunk).

    Returns:
        ``y``, ``(L, H)``, in the promoted dtype of the arguments.
    """
    if not (isinstance(chunk, int) and chunk > 0):
        raise ValueError(f"fused_recurrence needs a positive integer chunk, got {chunk!r}.")
    # One dtype for all, so that the custom VJP returns cotangents of the primal dtypes.
    dtype = jnp.result_type(lam_re, lam_im, B_in, C_out, u)
    args = (lam_re, lam_im, B_in, C_out, u)
    return _fused(*(x.astype(dtype) for x in args), _Plan(u.shape[0], chunk, bool(reverse)))


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Where the chunks lie: ``full`` chunks of ``chunk`` steps, then one of ``tail`` steps.

    Chunks are numbered in the order the primal scan visits them: from the start of the
    sequence forwards, or from its end backwards (``reverse``); the tail is visited last.
    """

    length: int
    chunk: int
    reverse: bool

    @property
    def full(self) -> int:
        return self.length // self.chunk

    @property
    def tail(self) -> int:
        return self.length % self.chunk

    def start(self, k):
        """First time index of full chunk ``k`` (traced or static)."""
        return self.length - (k + 1) * self.chunk if self.reverse else k * self.chunk

    @property
    def tail_start(self) -> int:
        return 0 if self.reverse else self.full * self.chunk

    def ends(self, size: int) -> tuple[int, int]:
        """(first, last) row of a chunk of ``size`` steps in the order the primal scan visits."""
        return (size - 1, 0) if self.reverse else (0, size - 1)


def _chunk_scan(lam_re, lam_im, b, reverse: bool):
    """The in-place loop over one chunk: the native kernel on CPU where it is built (the same
    numbers as XLA's loop, and faster: docs/performance.md), else `models._scan`'s XLA loop."""
    if _native.runs_on():
        return _native.planar_scan(lam_re, lam_im, b, reverse=reverse)
    return _sequential(lam_re, lam_im, b, reverse)


def _times_lam(lam_re, lam_im, h):
    """lam * h on one planar row ``(2, P)``."""
    return jnp.stack([lam_re * h[0] - lam_im * h[1], lam_re * h[1] + lam_im * h[0]])


def _chunk_states(plan: _Plan, lam_re, lam_im, B_in, u_c, h_in):
    """The states of one chunk, ``(T, 2, P)``, given the state ``h_in`` that enters it."""
    size = u_c.shape[0]
    first, _ = plan.ends(size)
    b = (u_c @ B_in.T).reshape(size, 2, -1)
    # h_first = lam h_in + b_first: the previous chunk's state enters as part of the input.
    b = b.at[first].add(_times_lam(lam_re, lam_im, h_in))
    return _chunk_scan(lam_re, lam_im, b, plan.reverse)


def _forward(lam_re, lam_im, B_in, C_out, u, plan: _Plan):
    """``(y, entering)``: the output and the state entering each chunk (full chunks, tail)."""
    length, states = u.shape[0], lam_re.shape[0]

    def run(h_in, start, size):
        u_c = lax.dynamic_slice_in_dim(u, start, size)
        h = _chunk_states(plan, lam_re, lam_im, B_in, u_c, h_in)
        _, last = plan.ends(size)
        return h[last], h.reshape(size, -1) @ C_out.T

    def body(k, carry):
        h_in, y, entering = carry
        start = plan.start(k)
        h_out, y_c = run(h_in, start, plan.chunk)
        y = lax.dynamic_update_slice_in_dim(y, y_c, start, 0)
        return h_out, y, entering.at[k].set(h_in)

    h = jnp.zeros((2, states), u.dtype)
    y = jnp.zeros((length, C_out.shape[0]), u.dtype)
    entering = jnp.zeros((plan.full + 1, 2, states), u.dtype)
    if plan.full:
        h, y, entering = lax.fori_loop(0, plan.full, body, (h, y, entering))
    entering = entering.at[plan.full].set(h)
    if plan.tail:
        _, y_c = run(h, plan.tail_start, plan.tail)
        y = lax.dynamic_update_slice_in_dim(y, y_c, plan.tail_start, 0)
    return y, entering


def _primal(lam_re, lam_im, B_in, C_out, u, plan: _Plan):
    return _forward(lam_re, lam_im, B_in, C_out, u, plan)[0]


_fused = jax.custom_vjp(_primal, nondiff_argnums=(5,))


def _fused_fwd(lam_re, lam_im, B_in, C_out, u, plan: _Plan):
    y, entering = _forward(lam_re, lam_im, B_in, C_out, u, plan)
    return y, (lam_re, lam_im, B_in, C_out, u, entering)


def _fused_bwd(plan: _Plan, residuals, dy):
    lam_re, lam_im, B_in, C_out, u, entering = residuals

    def run(a_out, h_in, start, size, grads):
        """One chunk's adjoint; ``a_out`` is the adjoint carried from the chunk visited next."""
        first, last = plan.ends(size)
        u_c = lax.dynamic_slice_in_dim(u, start, size)
        dy_c = lax.dynamic_slice_in_dim(dy, start, size)
        h = _chunk_states(plan, lam_re, lam_im, B_in, u_c, h_in)
        g = (dy_c @ C_out).reshape(size, 2, -1)
        # M^T = conj(lam): the later chunk's adjoint enters this chunk's last-visited row.
        g = g.at[last].add(_times_lam(lam_re, -lam_im, a_out))
        a = _chunk_scan(lam_re, -lam_im, g, not plan.reverse)
        # Pair each a_t with the state it multiplied; the first-visited row's is h_in.
        paired, previous = (a[:-1], h[1:]) if plan.reverse else (a[1:], h[:-1])
        a_first = a[first]
        d_re, d_im, d_B, d_C = grads
        for g_re, g_im in (lambda_cotangent(paired, previous),
                           lambda_cotangent(a_first[None], h_in[None])):
            d_re, d_im = d_re + g_re, d_im + g_im
        a_flat = a.reshape(size, -1)
        d_B = d_B + a_flat.T @ u_c
        d_C = d_C + dy_c.T @ h.reshape(size, -1)
        return a_first, a_flat @ B_in, (d_re, d_im, d_B, d_C)

    def body(i, carry):
        a_out, du, grads = carry
        k = plan.full - 1 - i  # full chunks in the reverse of the order the primal visited them
        start = plan.start(k)
        a_out, du_c, grads = run(a_out, entering[k], start, plan.chunk, grads)
        return a_out, lax.dynamic_update_slice_in_dim(du, du_c, start, 0), grads

    a = jnp.zeros_like(entering[0])
    du = jnp.zeros_like(u)
    grads = tuple(jnp.zeros_like(x) for x in (lam_re, lam_im, B_in, C_out))
    if plan.tail:
        a, du_c, grads = run(a, entering[plan.full], plan.tail_start, plan.tail, grads)
        du = lax.dynamic_update_slice_in_dim(du, du_c, plan.tail_start, 0)
    if plan.full:
        a, du, grads = lax.fori_loop(0, plan.full, body, (a, du, grads))
    d_re, d_im, d_B, d_C = grads
    return d_re, d_im, d_B, d_C, du


_fused.defvjp(_fused_fwd, _fused_bwd)
