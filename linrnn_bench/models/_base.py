"""The one abstract base every layer implements.

A layer is a parametrisation: `discrete_system()` maps its parameters to a `DiscreteSystem`, and
everything else (the forward pass, the hidden states, the kernel) is implemented here, once, on
the shared engine. The harness talks to layers only through these methods.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
from jaxtyping import Array, Complex, Float, PyTree

from . import _engine
from ._system import DiscreteSystem


class AbstractRecurrentLayer(eqx.Module):
    """A linear recurrent layer: one sequence ``(L, H) -> (L, H)``.

    Subclasses set the field ``algorithm`` (one of `models.ALGORITHMS`) and implement
    `discrete_system` and `recurrent_mask`.
    """

    algorithm: eqx.AbstractVar[str]

    @abc.abstractmethod
    def discrete_system(self) -> DiscreteSystem:
        """The discrete diagonal system the parameters define, recomputed on every call.

        Must hold: ``|lam| < 1`` for every state; ``apply(discrete_system(), u)`` equals the
        layer's paper-form recurrence on ``u``; the state norm ``||h_t||`` equals the paper's
        state norm (a change of basis used to diagonalise must be unitary).
        """

    @abc.abstractmethod
    def recurrent_mask(self) -> PyTree[bool]:
        """A pytree like ``self`` whose leaves say which arrays form the *recurrent* group.

        The recurrent group (eigenvalues, angles, decays, timescales, and the input map where
        the model's paper says so) is trained with its own learning rate and no weight decay.
        """

    def __call__(self, u: Float[Array, "L H"]) -> Float[Array, "L H"]:
        """y = the layer's output on one sequence ``u``, ``(L, H)`` -> ``(L, H)``.

        Any ``L >= 0``: an empty sequence gives an empty output, whatever the algorithm. An
        input that is not a JAX or NumPy array (a list), is batched, has the wrong width or is
        not floating-point is an error that says which and how to fix it (`models._engine`).
        """
        return _engine.apply(self.discrete_system(), u, algorithm=self.algorithm)

    def hidden_states(self, u: Float[Array, "L H"]) -> Complex[Array, "L P"]:
        """The forward-direction states h_t, ``(L, P)``; ``||h_t||`` is the paper's state norm."""
        return _engine.hidden_states(self.discrete_system(), u, algorithm=self.algorithm)

    def kernel(self, length: int) -> Float[Array, "..."]:
        """The forward impulse response: ``(L, H)`` for a bank, ``(L, H, H)`` otherwise."""
        return _engine.kernel(self.discrete_system(), length)

    def resolved_algorithm(self) -> str:
        """The concrete algorithm that `__call__` runs here (``"auto"`` resolved)."""
        return _engine.resolve_algorithm(self.algorithm, self.discrete_system())

    def rescaled(self, factor: float) -> "AbstractRecurrentLayer":
        """A copy whose timescales Delta are multiplied by ``factor``.

        For a sequence sampled ``factor`` times more coarsely (Speech Commands' 8 kHz zero-shot
        test, as the S4/S5 papers do it). Only layers discretised from continuous time have a
        Delta; the others raise.
        """
        raise NotImplementedError(
            f"{type(self).__name__} is parametrised in discrete time and has no timescale Delta "
            "to rescale; timescale rescaling is defined for the S4D and S5 layers."
        )

    @property
    def state_size(self) -> int:
        """P: complex states per direction."""
        return self.discrete_system().state_size


def mask_where(layer: eqx.Module, where: Callable[[Any], Any]) -> PyTree[bool]:
    """A pytree like ``layer``, True at the arrays ``where`` selects and False elsewhere: a
    `AbstractRecurrentLayer.recurrent_mask` from the selector of its group."""
    mask = jax.tree_util.tree_map(lambda _: False, layer)
    return eqx.tree_at(where, mask, replace_fn=lambda _: True)
