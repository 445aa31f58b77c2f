"""The layers from Flax: linen and NNX modules that hold the Equinox layers' parameters.

    from linrnn_bench.models.flax import linen, nnx, to_flax_params, from_flax_params

`models.flax.linen`: a generic module for any registered layer and drop-ins for the published
Flax codebases (minimal-LRU's ``LRU``, the S5 code's ``S5SSM``, the RotRNN authors' ``RotRNN``);
`models.flax.nnx`: NNX modules; `to_flax_params` / `from_flax_params`: exact conversions between
an Equinox layer and each module's parameter dict (the mapping table is in
`models.flax._convert`). The maths stays in the Equinox layers: every module rebuilds its layer
from its parameters and calls it.
"""

from . import linen as linen
from . import nnx as nnx
from ._convert import LAYOUTS as LAYOUTS
from ._convert import PUBLISHED as PUBLISHED
from ._convert import field_shapes as field_shapes
from ._convert import from_flax_params as from_flax_params
from ._convert import shaped_layer as shaped_layer
from ._convert import to_flax_params as to_flax_params
