"""Linear recurrent layers (RotRNN, LRU, S4D, S5) on one shared diagonal-recurrence engine."""

from ._base import AbstractRecurrentLayer as AbstractRecurrentLayer
from ._engine import ALGORITHMS as ALGORITHMS
from ._engine import apply as apply
from ._engine import hidden_states as hidden_states
from ._engine import kernel as kernel
from ._engine import resolve_algorithm as resolve_algorithm
from ._engine import scan as scan
from ._system import DiscreteSystem as DiscreteSystem
from ._registry import build as build
from ._registry import config_class as config_class
from ._registry import from_config as from_config
from ._registry import make_config as make_config
from ._registry import names as names
from ._registry import register as register
from .network import Network as Network
from .network import NetworkConfig as NetworkConfig
from .network import count_parameters as count_parameters
