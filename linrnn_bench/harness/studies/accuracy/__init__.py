"""The accuracy study: every model trained on every task with one recipe, over several seeds.

One run is one training run (`harness.train.train`) of one (model, task, seed[, depth]). Its
rows: one ``kind="eval"`` row per evaluation (step, lr, train_loss, val_loss, val_accuracy) and
one ``kind="final"`` row (best_step, val and test loss/accuracy of the checkpoint selected on
validation, params, recurrent_params, steps, epochs, train_seconds). Means and standard errors
over seeds are the report's job. The run's config (``cfg.task``, ``cfg.network.layer``,
``cfg.network.*``, ``cfg.train.*``, ``cfg.task_options``, ``cfg.seed``) is in the store.

Honest comparisons: every model of a task gets the same steps, batch size, width, depth and
recipe; what differs per model is only what its paper prescribes (layer options such as the
LRU's ring radii), stated in the preset's recipes with their source. The seed changes the
initialisation, the batch order and dropout; the data set is the same for every seed.

A run checkpoints after every evaluation (directory: ``$LINRNN_CHECKPOINTS``, default
``results/checkpoints``; the command line puts it beside the store), so an interrupted grid
resumes where it stopped and ends with the rows an uninterrupted one would have written.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd

from linrnn_bench import models
from linrnn_bench import tasks
from linrnn_bench.validation import is_integer, is_number
from linrnn_bench.models.network import NetworkConfig

from ... import config as _config
from ... import settings
from ...settings import Recipe as Recipe  # re-exported: presets and users build them here
from ...train import TrainConfig, checkpoint_dir, train, train_group
from .. import _matched
from .._schema import TRAINING, TRAINING_KINDS, Column, Schema, merged
from .._study import Study, read_presets, requires



@dataclasses.dataclass(frozen=True)
class AccuracyConfig:
    """The grid: models x tasks x seeds (x depths).

    Attributes:
        models: layer names (`models.names()`).
        tasks: task names (`tasks.names()`); each uses ``tasks.preset_options(task,
            task_preset)``, then the recipes' ``task.*`` options.
        seeds: one run per seed.
        depths: a depth sweep; empty for ``network.depth`` alone.
        task_preset: which of the tasks' own size presets to start from.
        network: the shared architecture; ``network.layer`` is replaced by each model, and
            ``network.layer_options`` apply to every model (model-specific ones go in recipes).
        train: the shared recipe.
        recipes: per model/task settings, applied in order after the shared ones (so a recipe
            wins over ``network.*``/``train.*`` overrides; ``recipes=()`` drops them all).
        tune_tasks: tasks on which every model is also trained at each learning-rate pair of
            the grid; the report selects a pair per (model, task) on validation.
        lr_grid, recurrent_lr_grid: the shared and the recurrent learning rates of the grid.
        lr_pairing: ``"product"``: every shared rate with every recurrent rate; ``"paired"``:
            the i-th shared rate with the i-th recurrent rate (both move together, their ratio
            fixed: a diagonal of the product, for a smaller budget).
        lr_extend: how many steps the grid may grow beyond either end for a (model, task)
            whose selected pair lies at that end (``lr_pairing="paired"`` only): once every
            seed of the cell has finished, a cell that selects its largest pair is also trained
            at the next larger one, continuing the grid's own spacing, and again while the
            new end is selected, up to ``lr_extend`` steps each way (likewise at the smallest
            pair). The selection stays on validation only; the report says whether each
            cell's optimum is bracketed. 0: the grid as given.
        lr_extensions: ``(model, task, depth, lr, recurrent_lr)`` pairs added beyond the grid's
            ends, read from the store by `bind` (what `lr_extend` made the grid); not a setting.
        tuning_seeds: how many of ``seeds`` (the first ones, `tune_seeds`) a tuned task is
            trained with at every learning-rate pair; its selection reads their validation
            metrics alone (`select`). Each cell's other seeds are trained at its selected pair
            only, once the selection is final (every pair of the tuning seeds finished, the
            grid grown as far as ``lr_extend`` lets it): these held-out seeds are the tuned
            configuration the report averages and compares, never the tuning seeds (whose
            test metrics the selection favoured). 0 (or as many as ``seeds``): every seed at
            every pair, and then no seed is held out and the report shows no tuned number.
            The parameter-matched runs (``match_parameters``) are tuned the same way, as cells
            of their own.
        lr_selected: ``(model, task, depth, lr, recurrent_lr)``: the pair each tuned cell has
            selected on its tuning seeds, read from the store by `bind` (where ``tuning_seeds``
            trains the other seeds at it; a parameter-matched cell's model is written
            ``matched:<model>``, `cell_key`); not a setting.
        left_out: ``(task, reason)`` for registered tasks this grid does not run, stated in
            the report so that a reader knows why they are absent.
        match_parameters: tasks on which every model is also trained sized to a common
            parameter budget (`harness.studies._matched`): the same width, its state size
            changed until its recurrent layer holds the budget's parameters within 5 %; at
            every learning-rate pair its equal-width runs are trained at. Each such run
            records its budget (``cfg.parameter_budget``) and its state size; the report shows
            them in a table of their own beside the equal-width results.
        parameter_budget: the budget of ``match_parameters``: ``"smallest"`` (the smallest
            layer among ``models`` at equal width, per task and depth), ``"largest"``, or a
            number of a layer's trained parameters.
        group_seeds: train the seeds of one (model, task, recipe) together as one program
            (`harness.train.train_group`: the same runs, ids and rows up to float round-off);
            false trains every run alone.
            Off by default: measured at the cpu preset in two workers (benchmarks/README.md)
            the groups were no faster than the seeds one by one, so the presets keep separate
            runs.
    """

    models: tuple[str, ...] = dataclasses.field(default_factory=lambda: entering_models())
    tasks: tuple[str, ...] = ("digits",)
    seeds: tuple[int, ...] = (0, 1, 2)
    depths: tuple[int, ...] = ()
    task_preset: str = "cpu"
    network: NetworkConfig = NetworkConfig()
    train: TrainConfig = TrainConfig()
    recipes: tuple[Recipe, ...] = ()
    tune_tasks: tuple[str, ...] = ()
    lr_grid: tuple[float, ...] = ()
    recurrent_lr_grid: tuple[float, ...] = ()
    lr_pairing: Literal["product", "paired"] = "product"
    lr_extend: int = 0
    lr_extensions: tuple[tuple[str, str, int, float, float], ...] = ()
    tuning_seeds: int = 0
    lr_selected: tuple[tuple[str, str, int, float, float], ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    match_parameters: tuple[str, ...] = ()
    parameter_budget: int | str = "smallest"
    group_seeds: bool = False

    def __post_init__(self):
        """Refuse a bad grid at construction, each error naming the value and what is
        accepted: the runs, then the recipes, the learning rates and the sizing."""
        self._check_runs()
        self._check_recipes()
        self._check_learning_rates()
        self._check_sizing()

    def _check_runs(self) -> None:
        """Check what the grid runs: models (an outside layer's import path registers it),
        tasks, distinct seeds, depths, the task preset and ``group_seeds``."""
        if not isinstance(self.group_seeds, bool):
            raise ValueError(f"group_seeds must be true or false; got {self.group_seeds!r}.")
        paths = [m for m in self.models if ":" in m]
        for path in paths:
            models.resolve(path)  # an outside layer's import path registers it (or says why not)
        names = tuple(m for m in self.models if m not in paths)
        if names or not paths:
            _nonempty_known("models", names, models.names())
        _nonempty_known("tasks", self.tasks, tasks.names())
        if not self.seeds:
            raise ValueError(
                f"seeds must be non-negative integers, at least one; got {self.seeds!r}."
            )
        for seed in self.seeds:
            _config.check_seed(seed, "seeds")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat a value: {self.seeds!r}.")
        if any(not is_integer(d) or d <= 0 for d in self.depths):
            raise ValueError(f"depths must be positive integers; got {self.depths!r}.")
        if self.task_preset not in tasks.PRESETS:
            raise ValueError(
                f"task_preset={self.task_preset!r} is not accepted; accepted values: "
                f"{list(tasks.PRESETS)}."
            )

    def _check_recipes(self) -> None:
        """Check that each recipe and each ``left_out`` entry names a known model and task
        (``left_out`` normalised to a tuple of pairs)."""
        for r in self.recipes:
            if r.model != "*":
                _nonempty_known("recipe model", (r.model,), models.names())
            if r.task != "*":
                _nonempty_known("recipe task", (r.task,), tasks.names())
        object.__setattr__(self, "left_out", tuple(tuple(p) for p in self.left_out))
        for pair in self.left_out:
            if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
                raise ValueError(f"left_out holds (task, reason) pairs; got {pair!r}.")
            _nonempty_known("left_out task", (pair[0],), tasks.names())

    def _check_learning_rates(self) -> None:
        """Check the learning-rate grid: ``tune_tasks`` among the tasks, the grids' values,
        their pairing and ``lr_extend`` (which needs a paired grid to continue), and the
        shape of ``lr_extensions`` (normalised to a tuple of tuples)."""
        stray = [t for t in self.tune_tasks if t not in self.tasks]
        if stray or len(set(self.tune_tasks)) != len(self.tune_tasks):
            raise ValueError(
                f"tune_tasks={self.tune_tasks!r} must be distinct members of "
                f"tasks={self.tasks!r} (or empty: no tuning)."
            )
        for name in ("lr_grid", "recurrent_lr_grid"):
            values = getattr(self, name)
            if any(not is_number(v) or not (math.isfinite(v) and v > 0) for v in values):
                raise ValueError(f"{name} must hold positive finite numbers; got {values!r}.")
            if len(set(values)) != len(values):
                raise ValueError(f"{name} repeats a value: {values!r}.")
            if self.tune_tasks and not values:
                raise ValueError(
                    f"tune_tasks={self.tune_tasks!r} needs a non-empty {name} (the learning "
                    "rates every model is tried at)."
                )
        if self.lr_pairing not in ("product", "paired"):
            raise ValueError(
                f"lr_pairing={self.lr_pairing!r} is not accepted; accepted values: "
                "['product', 'paired']."
            )
        if self.lr_pairing == "paired" and len(self.lr_grid) != len(self.recurrent_lr_grid):
            raise ValueError(
                f"lr_pairing='paired' needs lr_grid and recurrent_lr_grid of one length; got "
                f"{len(self.lr_grid)} and {len(self.recurrent_lr_grid)}."
            )
        if not is_integer(self.lr_extend) or not 0 <= self.lr_extend <= _MAX_EXTEND:
            raise ValueError(f"lr_extend must be an integer from 0 to {_MAX_EXTEND} (steps "
                             f"beyond each end of the grid); got {self.lr_extend!r}.")
        if self.lr_extend and (self.lr_pairing != "paired" or len(self.lr_grid) < 2):
            raise ValueError(
                f"lr_extend={self.lr_extend} needs lr_pairing='paired' and at least two pairs "
                "in the grid (its spacing is what an extension continues); set lr_extend=0.")
        for name in ("lr_extensions", "lr_selected"):
            object.__setattr__(self, name, tuple(tuple(e) for e in getattr(self, name)))
            if any(len(e) != 5 for e in getattr(self, name)):
                raise ValueError(f"{name} holds (model, task, depth, lr, recurrent_lr) entries "
                                 f"read from the store; got {getattr(self, name)!r}.")
        self._check_tuning_seeds()

    def _check_tuning_seeds(self) -> None:
        """Check ``tuning_seeds``: an integer from 0 to the number of seeds, and 0 unless a task
        is tuned (it counts the seeds a tuned task trains at every pair)."""
        if not is_integer(self.tuning_seeds) or self.tuning_seeds < 0:
            raise ValueError(
                f"tuning_seeds must be a non-negative integer (how many of the seeds, the first "
                f"ones, a tuned task trains at every learning-rate pair; 0: every seed); got "
                f"{self.tuning_seeds!r}.")
        n = len(self.seeds)
        if self.tuning_seeds > n:
            raise ValueError(
                f"tuning_seeds={self.tuning_seeds} is more than the {n} seed{'s' * (n != 1)} "
                f"given (seeds={self.seeds!r}); accepted: 0 to {n} (0: every seed at every "
                "learning-rate pair).")
        if self.tuning_seeds and not self.tune_tasks:
            raise ValueError(
                f"tuning_seeds={self.tuning_seeds} needs a tuned task, but tune_tasks is empty "
                "(tuning_seeds counts the seeds a tuned task trains at every learning-rate "
                "pair); accepted: tuning_seeds=0, or name the tasks to tune in tune_tasks.")

    def _check_sizing(self) -> None:
        """Check ``match_parameters`` (among the tasks) and ``parameter_budget``."""
        stray = [t for t in self.match_parameters if t not in self.tasks]
        if stray or len(set(self.match_parameters)) != len(self.match_parameters):
            raise ValueError(
                f"match_parameters={self.match_parameters!r} must be distinct members of "
                f"tasks={self.tasks!r} (or empty: equal width only).")
        _matched.check_budget(self.parameter_budget)


# The most steps a grid may grow beyond either end (each step is a cell's every seed again).
_MAX_EXTEND = 4


# Training reads each layer's recurrent mask (the recurrent parameters' own learning rate).
skip_reason = requires(models.RECURRENT_MASK)


def entering_models() -> tuple[str, ...]:
    """Every registered model that can enter the study, in the registry's order."""
    return tuple(m.name for m in models.infos() if skip_reason(m) is None)


def _nonempty_known(where: str, values: tuple[str, ...], accepted: list[str]) -> None:
    if not values:
        raise ValueError(f"{where} must name at least one; accepted: {', '.join(accepted)}.")
    unknown = [v for v in values if v not in accepted]
    if unknown:
        raise ValueError(f"Unknown {where} {unknown}; accepted: {', '.join(accepted)}.")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run, fully resolved (its hash is the run's identity).

    ``recipe_lr``/``recipe_recurrent_lr`` are the one shared recipe's rates for this (model,
    task): the run is the untuned one when ``train`` has them, one of the tuning grid's
    otherwise (the report tells the two apart by them).
    """

    task: str
    task_options: tuple[tuple[str, Any], ...]
    network: NetworkConfig
    train: TrainConfig
    seed: int
    recipe_lr: float
    recipe_recurrent_lr: float
    # The layer parameters this run was sized to (`AccuracyConfig.match_parameters`); None at
    # equal width, and then left out of the run's identity (ids of earlier runs unchanged).
    parameter_budget: int | None = dataclasses.field(
        default=None, metadata={_config.OMIT_DEFAULT: True})


def grid(config: AccuracyConfig) -> list[RunSpec]:
    """Every run of ``config``, seeds outermost (a partial grid covers every model early).

    On a task of ``tune_tasks`` each (model, seed) is trained at every learning-rate pair of
    `candidates` (the shared recipe's pair among them); elsewhere at the recipe's pair alone.
    With ``tuning_seeds``, a tuned task's other seeds are trained at the pair their cell has
    selected (``lr_selected``), and not at all until it has.
    """
    specs = []
    depths = config.depths or (config.network.depth,)
    for seed in config.seeds:
        for task in config.tasks:
            for model in config.models:
                for depth in depths:
                    spec = _resolve(config, model, task, depth, seed)
                    arms = [spec]
                    if task in config.match_parameters:
                        matched = _matched_spec(_sizing_key(config), model, task, depth)
                        # None: within the budget at equal width (its equal-width runs are
                        # its matched runs), or a layer that cannot be built to be counted
                        # (its equal-width runs fail and say why).
                        if matched is not None:
                            arms.append(dataclasses.replace(matched, seed=seed))
                    for arm in arms:
                        for lr, recurrent_lr in tuning_pairs(config, arm):
                            specs.append(dataclasses.replace(arm, train=dataclasses.replace(
                                arm.train, lr=lr, recurrent_lr=recurrent_lr)))
    return specs


def _sizing_key(config: AccuracyConfig) -> AccuracyConfig:
    """``config`` without what does not decide a matched run's sizes (a cache key)."""
    return dataclasses.replace(config, seeds=(0,), lr_extensions=(), tune_tasks=(),
                               lr_grid=(), recurrent_lr_grid=(), lr_extend=0, tuning_seeds=0)


@functools.cache
def _matched_spec(config: AccuracyConfig, model: str, task: str, depth: int
                  ) -> RunSpec | None:
    """``model``'s run on ``task`` (seed 0) sized to the cell's parameter budget; None when
    its equal-width run already is (within `_matched.TOLERANCE`) or its layer cannot be built.
    The budget is over the models whose layers can be built."""
    where = f"accuracy run ({model}, {task}) at matched parameters"
    networks = {m: _resolve(config, m, task, depth, 0).network for m in config.models}
    counts = {m: _matched.counted(network) for m, network in networks.items()}
    if counts[model] is None:
        return None
    target = _matched.budget(config.parameter_budget,
                             {m: c for m, c in counts.items() if c is not None})
    if abs(counts[model] - target) <= _matched.TOLERANCE * target:
        return None

    def at(d_state: int) -> RunSpec | None:
        sized = Recipe(model=model, task=task, overrides=(("network.d_state", d_state),),
                       source=f"sized to {target} layer parameters (match_parameters)")
        try:
            spec = _resolve(dataclasses.replace(config, recipes=(*config.recipes, sized)),
                            model, task, depth, 0)
        except (ValueError, TypeError):
            return None
        return dataclasses.replace(spec, parameter_budget=target)

    return _matched.matched(at, model, networks[model].d_state, target, where)


def programs(spec: RunSpec) -> tuple[Any, ...]:
    """What decides the programs a run compiles (`Study.programs`): the task and its shapes,
    the network, the batch sizes and whether gradients are clipped; seeds, learning rates,
    weight decay and schedule lengths are data of the compiled step."""
    train = spec.train
    return (spec.task, spec.task_options, spec.network, train.batch_size, train.eval_batch_size,
            train.clip_norm is None)


def cell_key(spec: RunSpec) -> tuple[str, str, int]:
    """The tuning cell a run belongs to, as ``lr_extensions`` and ``lr_selected`` name it:
    (model, task, depth), the model prefixed ``matched:`` for a run sized to a parameter
    budget (an arm with its own selection)."""
    model = spec.network.layer
    return (model if spec.parameter_budget is None else f"matched:{model}", spec.task,
            spec.network.depth)


def candidates(config: AccuracyConfig, spec: RunSpec) -> list[tuple[float, float]]:
    """The (lr, recurrent_lr) pairs ``spec``'s task is trained at: the recipe's pair first, then
    on a task of ``tune_tasks`` the grid's pairs (`AccuracyConfig.lr_pairing`)."""
    recipe = (spec.train.lr, spec.train.recurrent_lr)
    if spec.task not in config.tune_tasks:
        return [recipe]
    if config.lr_pairing == "paired":
        grid_pairs = list(zip(config.lr_grid, config.recurrent_lr_grid))
    else:
        grid_pairs = [(a, b) for a in config.lr_grid for b in config.recurrent_lr_grid]
    cell = cell_key(spec)
    grid_pairs += [(lr, rlr) for *key, lr, rlr in config.lr_extensions if tuple(key) == cell]
    return [recipe] + [p for p in dict.fromkeys(grid_pairs) if p != recipe]


def tune_seeds(config: AccuracyConfig) -> tuple[int, ...]:
    """The seeds a tuned task trains at every learning-rate pair: the first ``tuning_seeds``
    of ``seeds``, or every seed when it is 0."""
    return config.seeds[:config.tuning_seeds] if config.tuning_seeds else config.seeds


def _completing(config: AccuracyConfig) -> bool:
    """Whether some seeds of a tuned task train at its selected pair alone (``tuning_seeds``
    fewer than the seeds)."""
    return len(tune_seeds(config)) < len(config.seeds)


def tuning_pairs(config: AccuracyConfig, spec: RunSpec) -> list[tuple[float, float]]:
    """The pairs a run ``spec`` (at the recipe's rates; either arm) is trained at: its
    `candidates` at a tuning seed (`tune_seeds`), the cell's selected pair (``lr_selected``,
    none before the selection is final) at another seed of a tuned task."""
    if spec.task not in config.tune_tasks or spec.seed in tune_seeds(config):
        return candidates(config, spec)
    cell = cell_key(spec)
    return [(lr, rlr) for *key, lr, rlr in config.lr_selected if tuple(key) == cell]


# --------------------------------------------------------------------------------------------
# A grid that brackets each cell's optimum (`AccuracyConfig.lr_extend`)


def next_pair(pairs: list[tuple[float, float]], direction: int) -> tuple[float, float]:
    """The pair one step beyond the end of ``pairs`` (sorted by shared rate) in ``direction``
    (+1: larger, -1: smaller), continuing the grid's own spacing: each rate times the ratio
    between the two pairs that a period of the spacing back (a grid of 3e-3, 1e-2, 3e-2
    continues with 1e-1 above and 1e-3 below; a geometric grid, with its own factor)."""
    ordered = pairs if direction > 0 else pairs[::-1]
    span = 2 if len(ordered) >= 3 else 1  # two steps back keeps an alternating 1-3 spacing
    end, back, further = ordered[-1], ordered[-1 - span], ordered[-span]
    return tuple(float(f"{e * f / b:.6g}") for e, f, b in zip(end, further, back)
                 )  # type: ignore[return-value]


def tuning_state(config: AccuracyConfig, store: Any
                 ) -> tuple[tuple[tuple[str, str, int, float, float], ...],
                            tuple[tuple[str, str, int, float, float], ...]]:
    """``(lr_extensions, lr_selected)`` from the runs ``store`` holds. Per tuned (model, task,
    depth), over its tuning seeds (`tune_seeds`): step outwards while every run of the current
    pairs has finished (done or diverged) and `select` picks an end pair of the grid (its
    paired diagonal and the steps so far; the recipe's pair is no end) that may still grow
    (``lr_extend``); a cell whose runs have all finished and that may grow no further has its
    selection final, and its pair is in ``lr_selected`` (needed only with ``tuning_seeds``)."""
    completing = _completing(config)
    if not config.tune_tasks or not (config.lr_extend or completing):
        return (), ()
    base = dataclasses.replace(config, lr_extensions=(), lr_selected=())
    runs = store.runs(STUDY.name)
    if runs.empty:
        return (), ()
    status = dict(zip(runs["run_id"], runs["status"]))
    rows = store.read(STUDY.name)
    finals = rows[rows["kind"] == "final"] if not rows.empty else rows
    cells: dict[tuple[str, str, int], list[RunSpec]] = {}
    for spec in grid(base):
        if spec.task in config.tune_tasks:
            cells.setdefault(cell_key(spec), []).append(spec)
    # The paired grid's own diagonal, which a step continues: the recipe's pair is trained too
    # but is no point of the grid's spacing (counted in, it bent the steps off the diagonal).
    diagonal = sorted(zip(config.lr_grid, config.recurrent_lr_grid))
    added, selected = [], []
    for cell, specs in cells.items():
        pairs = sorted({(s.train.lr, s.train.recurrent_lr) for s in specs})
        seeds = [s for s in specs if (s.train.lr, s.train.recurrent_lr) == pairs[0]]
        grown, ends = {+1: 0, -1: 0}, list(diagonal)
        while True:
            ids = [STUDY.run_id(dataclasses.replace(s, train=dataclasses.replace(
                s.train, lr=lr, recurrent_lr=rlr))) for lr, rlr in pairs for s in seeds]
            if any(status.get(i) not in ("done", "diverged") for i in ids):
                break  # the cell is still running: its selection is not decided yet
            cell_rows = finals[finals["run_id"].isin(set(ids))] if not finals.empty else finals
            chosen = select(cell_rows, selection_of(cell_rows))
            direction = ({ends[-1]: +1, ends[0]: -1}.get(chosen)
                         if chosen and config.lr_extend else None)
            if direction is not None and grown[direction] < config.lr_extend:
                pair = next_pair(ends, direction)
                grown[direction] += 1
                added.append((*cell, *pair))
                pairs, ends = sorted({*pairs, pair}), sorted([*ends, pair])
                continue
            if chosen is not None and completing:
                selected.append((*cell, *chosen))
            break
    return tuple(added), tuple(selected)


def widest(config: AccuracyConfig) -> AccuracyConfig:
    """``config`` with every pair `lr_extend` could add: each tuned cell's grid grown by
    ``lr_extend`` steps at both ends, and the seeds beyond ``tuning_seeds`` at one pair (what a
    plan prices: the most runs the grid can reach)."""
    if not config.tune_tasks or not (config.lr_extend or _completing(config)):
        return config
    base = list(zip(config.lr_grid, config.recurrent_lr_grid))
    added = []
    for direction in (+1, -1):
        pairs = sorted(base)
        for _ in range(config.lr_extend):
            pair = next_pair(pairs, direction)
            added.append(pair)
            pairs = sorted([*pairs, pair])
    cells = {cell_key(s) for s in grid(config) if s.task in config.tune_tasks}
    recipe = (config.train.lr, config.train.recurrent_lr)
    # The seeds beyond ``tuning_seeds`` at one pair per cell (which one is priced alike).
    return dataclasses.replace(config, lr_extensions=tuple(
        (*cell, *pair) for cell in sorted(cells) for pair in added),
        lr_selected=tuple((*cell, *recipe) for cell in sorted(cells))
        if _completing(config) else ())


def bind(config: AccuracyConfig, store: Any) -> AccuracyConfig:
    """``config`` with ``lr_extensions`` and ``lr_selected`` read from ``store``
    (`Study.from_store`): the pairs beyond the grid's ends that its cells' selections have asked
    for so far, and the cells whose selection is final (`tuning_state`)."""
    added, selected = tuning_state(config, store)
    if not config.lr_extend and not selected:
        return config
    return dataclasses.replace(config, lr_extensions=added, lr_selected=selected)


def resolve(config: AccuracyConfig, model: str, task: str, depth: int | None = None
            ) -> settings.Resolved:
    """The settings of ``model``'s run on ``task`` (at ``depth`` of a depth sweep) and where
    each came from (`harness.settings.resolve`, in its documented order): the task preset, the
    model's registration for the task, the width options, ``network.layer_options``, then the
    recipes (the command line's last)."""
    return settings.resolve(
        model, task, task_preset=config.task_preset, network=config.network,
        train=config.train, depth=depth if config.depths else None,
        layer_options=config.network.layer_options, recipes=config.recipes,
        where=f"accuracy run ({model}, {task})")


def _resolve(config: AccuracyConfig, model: str, task: str, depth: int, seed: int) -> RunSpec:
    resolved = resolve(config, model, task, depth)
    return RunSpec(task, resolved.task_options, resolved.network, resolved.train, seed,
                   resolved.train.lr, resolved.train.recurrent_lr)


def run(spec: RunSpec) -> list[dict[str, Any]]:
    """Train one run; its rows (see the module docstring)."""
    task = tasks.build(spec.task, **dict(spec.task_options))
    path = checkpoint_dir() / f"accuracy-{STUDY.run_id(spec)}.eqx"
    result = train(spec.network, task, spec.train, seed=spec.seed, checkpoint=path, progress=True)
    rows = result.rows
    rows[-1] = {**rows[-1], **trivial_baseline(task.info.target, task.split("train").labels,
                                               task.split("test").labels)}
    return rows


def group(config: AccuracyConfig, spec: RunSpec) -> RunSpec | None:
    """The seed group ``spec`` trains in (`Study.group`): the runs equal to it but for the seed,
    unless ``config.group_seeds`` is off."""
    return dataclasses.replace(spec, seed=0) if config.group_seeds else None


def run_group(specs: list[RunSpec]) -> list[list[dict[str, Any]] | Exception]:
    """Train the seeds of one group together (`Study.run_group`); each run's rows as `run`
    gives them, or its `Diverged`."""
    first = specs[0]
    task = tasks.build(first.task, **dict(first.task_options))
    paths = [checkpoint_dir() / f"accuracy-{STUDY.run_id(s)}.eqx" for s in specs]
    results = train_group(first.network, task, first.train, seeds=[s.seed for s in specs],
                          checkpoints=paths, progress=True)
    baseline = trivial_baseline(task.info.target, task.split("train").labels,
                                task.split("test").labels)
    out: list[list[dict[str, Any]] | Exception] = []
    for result in results:
        if isinstance(result, Exception):
            out.append(result)
        else:
            out.append([*result.rows[:-1], {**result.rows[-1], **baseline}])
    return out


def trivial_baseline(target: str, train_labels: np.ndarray, test_labels: np.ndarray
                     ) -> dict[str, float | None]:
    """What a model that ignores its input scores on the test split, fitted on the train split.

    Classification (``"class"``, and ``"per_step"`` over its scored steps, label >= 0): always
    the training split's most frequent class (accuracy), and its class frequencies as the
    predicted distribution (cross-entropy, with frequencies floored at 1e-12). Regression: the
    training mean (mean squared error; accuracy None). The keys are those of the final row:
    ``baseline_test_accuracy``, ``baseline_test_loss``.
    """
    if target == "regression":
        mean = float(np.mean(train_labels))
        return {"baseline_test_accuracy": None,
                "baseline_test_loss": float(np.mean((np.asarray(test_labels) - mean) ** 2))}
    train = np.asarray(train_labels).reshape(-1)
    test = np.asarray(test_labels).reshape(-1)
    train, test = train[train >= 0], test[test >= 0]
    classes = int(max(train.max(initial=0), test.max(initial=0))) + 1
    counts = np.bincount(train, minlength=classes).astype(np.float64)
    frequencies = np.maximum(counts / counts.sum(), 1e-12)
    majority = int(np.argmax(counts))
    return {"baseline_test_accuracy": float(np.mean(test == majority)),
            "baseline_test_loss": float(-np.mean(np.log(frequencies[test])))}


def selecting(final: pd.DataFrame) -> pd.DataFrame:
    """The rows of one cell's final rows that choose its pair: those of the seeds trained at
    more than one pair (the tuning seeds, ``AccuracyConfig.tuning_seeds``), so that every pair
    is judged on the same seeds and a seed trained only at the selected pair (after the
    selection) does not weigh in; every row when no seed was (a cell of one pair) or when
    ``final`` names no seed."""
    if final.empty or "seed" not in final.columns:
        return final
    pairs = final.drop_duplicates(["seed", LR, RECURRENT_LR]).groupby("seed").size()
    tuning = pairs.index[pairs > 1]
    return final[final["seed"].isin(tuning)] if len(tuning) else final


def selection_of(final: pd.DataFrame) -> str:
    """What one cell's runs were selected on: ``"loss"`` when every final row says so (a
    regression task), else ``"accuracy"``."""
    column = COLUMNS.names.selection
    return ("loss" if not final.empty and column in final.columns
            and (final[column] == "loss").all() else "accuracy")


def select(final: pd.DataFrame, selection: str) -> tuple[float, float] | None:
    """The (lr, recurrent_lr) of one (model, task) cell whose mean validation metric over its
    tuning seeds (`selecting`) is best: accuracy (highest) or loss (lowest). Ties go to the
    smaller rates, in order (`tied` says whether that rule decided).

    ``final`` holds the cell's final rows (columns `LR`, `RECURRENT_LR`, ``val_accuracy``,
    ``val_loss``, and ``seed``); None if it is empty.
    """
    order = _ranked_pairs(final, selection)
    return tuple(float(v) for v in order[0][0]) if order else None  # type: ignore[return-value]


def tied(final: pd.DataFrame, selection: str) -> bool:
    """Whether `select`'s choice was decided by its tie rule: another pair has the same mean
    validation metric over the tuning seeds (equal to float precision)."""
    order = _ranked_pairs(final, selection)
    return len(order) > 1 and math.isclose(order[0][1], order[1][1], rel_tol=1e-12,
                                           abs_tol=1e-15)


def _ranked_pairs(final: pd.DataFrame, selection: str) -> list[tuple[tuple[float, float], float]]:
    """The cell's pairs with their mean validation metric over the tuning seeds, best first
    (ties: the smaller rates first)."""
    final = selecting(final)
    if final.empty:
        return []
    column, sign = ("val_accuracy", -1.0) if selection == "accuracy" else ("val_loss", 1.0)
    if column not in final.columns:
        return []
    means = (final.assign(metric=pd.to_numeric(final[column], errors="coerce"))
             .groupby([LR, RECURRENT_LR])["metric"].mean().dropna())
    return sorted(means.items(), key=lambda item: (sign * item[1], item[0]))


# Columns of the store that the report and `select` read (a study owns its rows' schema).
LR = "cfg.train.lr"
RECURRENT_LR = "cfg.train.recurrent_lr"
RECIPE_LR = "cfg.recipe_lr"
RECIPE_RECURRENT_LR = "cfg.recipe_recurrent_lr"

# The rows a run writes: the training loop's (`harness.train.train`), the final row with the
# task's trivial baseline (`trivial_baseline`).
COLUMNS = Schema(
    columns=merged(TRAINING, {
        "baseline_test_accuracy": Column(float, "test accuracy of the trivial baseline (the "
                                                "training split's majority class); None on a "
                                                "regression task", nullable=True),
        "baseline_test_loss": Column(float, "its test loss: cross-entropy of the training "
                                            "split's class frequencies, or the mean squared "
                                            "error of its mean"),
    }),
    kinds={**TRAINING_KINDS,
           "final": (*TRAINING_KINDS["final"], "baseline_test_accuracy", "baseline_test_loss")},
)


def take_layer_options(config: AccuracyConfig, options: Mapping[str, str]) -> AccuracyConfig:
    """``config`` with the command line's ``layer.<option>`` values as its last recipe, set on
    every model whose config has the option (as ``train`` does)."""
    recipe = Recipe(overrides=tuple((f"layer.{k}", v) for k, v in options.items()),
                    source=settings.COMMAND_LINE)
    return dataclasses.replace(config, recipes=(*config.recipes, recipe))


def one_run(base: AccuracyConfig, model: str, task: str, seeds: tuple[int, ...],
            overrides: tuple[tuple[str, str], ...]) -> AccuracyConfig:
    """``base`` narrowed to the one run of ``linrnn-bench train``: ``model`` on ``task`` with
    ``seeds`` (trained as one group), no depth sweep or tuning grid, and ``overrides`` (the
    command line's ``key=value`` pairs) as the last recipe. A bad value is a `ValueError`."""
    return dataclasses.replace(
        base,
        models=(model,),
        tasks=(task,),
        seeds=tuple(seeds),
        group_seeds=True,  # seeds=0,1,2 trains the seeds as one group
        depths=(),
        tune_tasks=(),  # one run at the recipe's learning rates, not the tuning grid
        tuning_seeds=0,
        recipes=(*base.recipes, Recipe(overrides=overrides, source=settings.COMMAND_LINE)),
    )


STUDY = Study(
    name="accuracy",
    description="Test accuracy at the best validation step: every model on every task and seed.",
    presets=read_presets(__name__, AccuracyConfig),
    grid=grid,
    run=run,
    planner=f"{__name__}.plan:plan",
    section=f"{__name__}.report:SECTION",
    # 3: batches of a task shorter than 128 tokens are no longer cut to length buckets
    # (`harness.train.BUCKET_SPACING`), which changes its runs at float round-off.
    version=3,
    skip_reason=skip_reason,
    programs=programs,
    group=group,
    run_group=run_group,
    from_store=bind,
    take_layer_options=take_layer_options,
    one_run=one_run,
    resolve_run=resolve,
)
