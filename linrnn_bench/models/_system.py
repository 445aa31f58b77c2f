"""The one discrete system every layer is a parametrisation of.

Dimension letters used throughout `models/` (the glossary):

    L  sequence length (time steps)
    H  model width: the layer's input and output channels
    P  number of complex states of one direction (the state the engine scans)
    N  states per channel of a bank of single-input single-output systems (S4D): P = H * N

A layer maps its parameters to

    h_t = lambda * h_{t-1} + B u_t          lambda complex, |lambda| < 1, diagonal
    y_t = out(C h_t) + D * u_t               out = Re, or 2 Re under conjugate symmetry

and the engine (`models/_engine.py`) computes that system. Two structures exist:

- ``"mimo"``: one multi-input multi-output system; ``lam (P,)``, ``B (P, H)``, ``C (H, P)``.
- ``"bank"``: H independent single-input single-output systems of N states each (S4D);
  ``lam (H, N)``, ``B (H, N)``, ``C (H, N)``. The state of channel h only sees ``u[:, h]`` and
  only feeds ``y[:, h]``, so the engine never materialises a dense ``(H N) x H`` matrix.
  Its flattened state has ``P = H * N`` entries, channel-major.

A bidirectional layer adds ``C_reverse``: a second scan runs over the reversed sequence with the
same ``lam`` and ``B`` and its own output map, and the two outputs are summed (S5, S4's
bidirectional kernel, RotRNN's bidirectional option).
"""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Complex, Float

Structure = Literal["mimo", "bank"]
STRUCTURES: tuple[str, ...] = ("mimo", "bank")
_ARRAY_FIELDS: tuple[str, ...] = ("lam", "B", "C", "D", "C_reverse")


class DiscreteSystem(eqx.Module):
    """A diagonal linear time-invariant system in discrete time.

    Fields:
        lam: the diagonal of the state matrix, ``(P,)`` (mimo) or ``(H, N)`` (bank).
        B: the input map B_bar, ``(P, H)`` (mimo) or ``(H, N)`` (bank).
        C: the output map, ``(H, P)`` (mimo) or ``(H, N)`` (bank).
        D: the skip connection, ``(H,)``.
        C_reverse: the output map of the reverse-time scan, same shape as ``C``, or ``None``.
        conj_sym: if True the output is ``2 Re(C h)`` (half of a conjugate-symmetric spectrum
            is stored); otherwise ``Re(C h)``.
        structure: ``"mimo"`` or ``"bank"`` (see the module docstring).
    """

    lam: Complex[Array, "..."]
    B: Complex[Array, "..."]
    C: Complex[Array, "..."]
    D: Float[Array, " H"]
    C_reverse: Complex[Array, "..."] | None = None
    conj_sym: bool = eqx.field(static=True, default=False)
    structure: Structure = eqx.field(static=True, default="mimo")

    def __check_init__(self):
        if self.structure not in STRUCTURES:
            raise ValueError(
                f"DiscreteSystem.structure must be one of {STRUCTURES}, got {self.structure!r}."
            )
        self._check_shapes()

    def _check_shapes(self) -> None:
        """The fields' shapes agree with `structure` (see the module docstring)."""
        shapes = {name: getattr(getattr(self, name), "shape", None) for name in _ARRAY_FIELDS}
        if any(shapes[name] is None for name in ("lam", "B", "C", "D")):
            return  # placeholders (e.g. a partitioned pytree), nothing to check
        lam, D = shapes["lam"], shapes["D"]
        if len(D) != 1:
            raise ValueError(f"DiscreteSystem.D must have shape (H,), got {D}.")
        (H,) = D
        if self.structure == "mimo":
            if len(lam) != 1:
                raise ValueError(
                    f"A 'mimo' DiscreteSystem needs lam of shape (P,), got {lam}; a bank of "
                    "single-input single-output systems is structure='bank' with lam (H, N)."
                )
            expected = {"B": (lam[0], H), "C": (H, lam[0]), "C_reverse": (H, lam[0])}
            layout = "lam (P,), B (P, H), C (H, P), D (H,)"
        else:
            if len(lam) != 2 or lam[0] != H:
                raise ValueError(
                    f"A 'bank' DiscreteSystem needs lam of shape (H, N) with H = {H} (the length "
                    f"of D), got {lam}."
                )
            expected = {"B": lam, "C": lam, "C_reverse": lam}
            layout = "lam, B, C of shape (H, N) and D (H,)"
        for name, shape in expected.items():
            if shapes[name] is not None and tuple(shapes[name]) != tuple(shape):
                raise ValueError(
                    f"DiscreteSystem.{name} has shape {shapes[name]}, expected {shape} for "
                    f"structure={self.structure!r} ({layout}; here H = {H})."
                )

    @property
    def bidirectional(self) -> bool:
        return self.C_reverse is not None

    @property
    def d_model(self) -> int:
        """H: the number of input/output channels."""
        return self.D.shape[0]

    @property
    def state_size(self) -> int:
        """P: the number of complex states of one direction (H * N for a bank)."""
        return int(jnp.size(self.lam))

    @property
    def output_scale(self) -> float:
        """2 for conjugate-symmetric systems (y = 2 Re(C h)), else 1."""
        return 2.0 if self.conj_sym else 1.0


def optional_complex(
    re: Float[Array, "..."] | None, im: Float[Array, "..."] | None
) -> Complex[Array, "..."] | None:
    """``re + i im`` from a layer's pair of real fields, or None where the pair is absent (the
    ``C_reverse`` of a one-way layer)."""
    return None if re is None or im is None else jax.lax.complex(re, im)
