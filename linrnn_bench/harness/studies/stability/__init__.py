"""The stability study: the hidden-state norm of every layer, at initialisation and in training.

The claim under test (RotRNN paper): the rotation and the normaliser xi keep the hidden-state
norm near constant through training, across depth and seeds, while the LRU's learned normaliser
lets it drift. The study measures the same quantity for every layer, through the layer contract
only (`Network.layer_states`, which calls each layer's `hidden_states`, and `discrete_system`):

    n_{k,t}(x) = ||h^k_t(x)||_2        layer k's forward state after step t on probe example x

the Euclidean norm of the complex state vector, which for RotRNN equals the norm of its real
state because the change of basis P is orthogonal. Padding steps are excluded. Per layer and
evaluation step a run records

- ``kind="layer"``: the mean, standard deviation, min and max of n_{k,t} over probe examples and
  valid steps, the mean at each example's last valid step, min / median / max of the eigenvalue
  moduli |lambda| of the layer's discrete system (only for a layer that declares one: an
  input-dependent recurrence such as a selective SSM has no fixed eigenvalues, and its norms
  are measured all the same), and (trained runs) the norm of the loss
  gradient with respect to the layer's parameters (probe batch, training-mode BatchNorm, no
  dropout);
- ``kind="profile"``: the mean of n_{k,t} over probe examples still valid at t, for about
  ``profile_points`` steps t log-spaced in [1, L];
- ``kind="probe"`` (trained runs): the probe batch's loss;
- ``kind="stationary"``: the same norm on a **long probe** (`LongProbe`): ``long_probe_size``
  sequences of the training split's examples laid back to back (``long_probe="stream"``: every
  step from the distribution the network is trained on), ``probe_length`` steps doubled until
  the window opens after three memories 1 / (1 - |lambda|) of every mode that carries 1 % of
  a layer's stationary energy (the per-mode regime check, `harness.state_norm.mode_regime`,
  on the network as it is at that step), so that the norm averaged over each sequence's last
  ``window`` fraction of steps is the stationary level the normalisers fix rather than the
  transient build-up (which grows like sqrt(t) whatever the normalisation); or
  (``long_probe="generator"``) sequences drawn by the task's own generator at ``probe_length``
  to twice that many steps (`tasks.lengthened`; ListOps by LRA's rules: deeper and longer
  trees than any trained on). Beside the norm: the RMS of the layer's input per step and, for
  a layer with a discrete system, of its drive ||B u_t|| and the gain (the RMS norm over the
  drive's), which attribute a change of the norm to the input's scale or to the recurrence;
  the ratio of the RMS norm to the closed form (`harness.state_norm.expected_energy`) for the
  layer's current system fed a temporally white input of the per-state energy the layer's
  actual input puts in, the white-noise energy reached at the window's first step and the
  steps to 90 % of it (memory), and the per-mode check's verdict, the share of the
  stationary energy in modes that had not settled and the slowest carrying mode's memory;

on a fixed probe batch (the first ``probe_size`` examples of the validation split, the same for
every seed and model), without dropout, at step 0 and at every evaluation of
`harness.train.train`. Each layer's input is normalised by BatchNorm with the probe batch's own
statistics, as in a training step (``statistics="batch"``, the default): in inference mode the
running statistics are still (0, 1) at initialisation, pre-norm is then the identity and the
growing residual stream would reach deeper layers unnormalised, which is not what the layers see
in training. ``statistics="running"`` measures in inference mode instead. Runs at depths not in
``train_depths`` are measured at initialisation only (the depth sweep); trained runs add the
training loop's own rows (``kind="eval"``, ``kind="final"``).

The variants compare the four layers and the ablations that explain them: RotRNN with xi
switched off and with the other gamma initialisation, and the LRU without its gamma normaliser.
The report (`harness.studies.stability.report`) splits the stationary norm's variation into its depth,
seed, drift and settle components (`harness.state_norm`) and keeps the coefficient of
variation of the probe batch's norms as the transient-regime measure.

This module holds the configuration, the grid, the rows' schema, the presets and how a run is
run; the measurement (`Probe`, `LongProbe` and the rows they make) is
`harness.studies.stability_probe`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Literal

import jax.random as jr
import numpy as np

from linrnn_bench import models
from linrnn_bench import tasks
from linrnn_bench import validation
from linrnn_bench.models.network import NetworkConfig

from ... import config as _config
from ... import settings
from ... import train as training
from ...variants import check_variants, variant, variants
from .._schema import TRAINING, TRAINING_KINDS, Column, Schema, merged
from ..stability_probe import (LONG_PROBES, STATISTICS, Probe, Statistics, long_probe_bytes,
                               stream_ladder)
from .._study import Diverged, Study, read_presets, requires

# The probe reads each layer's hidden states (the paper's state norm); the eigenvalue columns
# come from the discrete system of a layer that declares one, and are left out for the others.
skip_reason = requires(models.HIDDEN_STATES)


def entering_variants() -> tuple[str, ...]:
    """Every registered variant whose model can enter the study, in the registry's order."""
    return tuple(k for k, v in variants().items() if skip_reason(models.info(v.model)) is None)


# The rows a run writes (module docstring): the probe's, then a trained run's training rows.
_NORM = "||h_t|| of the layer's forward states, over probe examples and valid steps"
COLUMNS = Schema(
    columns=merged(TRAINING, {
        "layer": Column(int, "the block whose layer is measured, 1 nearest the input"),
        "norm_mean": Column(float, f"mean of {_NORM}"),
        "norm_std": Column(float, f"standard deviation of {_NORM}"),
        "norm_min": Column(float, f"smallest {_NORM}"),
        "norm_max": Column(float, f"largest {_NORM}"),
        "norm_last": Column(float, "mean over probe examples of ||h_t|| at each example's last "
                                   "valid step"),
        "lam_min": Column(float, "smallest eigenvalue modulus |lambda| of the layer's system"),
        "lam_median": Column(float, "median eigenvalue modulus |lambda|"),
        "lam_max": Column(float, "largest eigenvalue modulus |lambda|"),
        "grad_norm": Column(float, "norm of the probe loss's gradient w.r.t. the layer's "
                                   "parameters (trained runs only)"),
        "t": Column(int, "the step of the sequence (1 = after the first input)"),
        "norm": Column(float, "mean ||h_t|| over the probe examples still valid at t"),
        "examples": Column(int, "probe examples valid at t"),
        "probe_loss": Column(float, "the probe batch's loss (training-mode BatchNorm)"),
        "norm_stationary": Column(float, "mean over the long probe's examples of ||h_t|| "
                                         "averaged over each example's last steps (the "
                                         "stationary window)"),
        "t_from": Column(int, "the earliest step of any example's stationary window"),
        "t_to": Column(int, "the longest long-probe example, in steps"),
        "lengthened": Column(bool, "whether the long probe's sequences are longer than the "
                                   "task's own (false: a generator probe of a task that cannot "
                                   "draw longer ones, and the ordinary probe batch is used)"),
        "source": Column(str, "the long probe: stream (training examples back to back) or "
                              "generator (the task's generator at longer lengths)"),
        "norm_rms": Column(float, "root of the mean ||h_t||^2 over the long probe's windows"),
        "input_rms": Column(float, "root of the mean ||u_t||^2 of the layer's input (after its "
                                   "normalisation) over the long probe's valid steps"),
        "drive_rms": Column(float, "root of the mean ||B u_t||^2 the input drives the states "
                                   "with, per step"),
        "gain": Column(float, "norm_rms / drive_rms: the recurrence's amplification of its "
                              "drive", nullable=True),
        "settled": Column(bool, "the per-mode regime check: every mode carrying >= 1% of the "
                                "stationary energy ran >= 3 memories 1/(1-|lambda|) before "
                                "t_from"),
        "unsettled_share": Column(float, "share of the stationary energy in modes that had not "
                                         "run 3 memories by t_from"),
        "memory_slowest": Column(float, "the largest memory 1/(1-|lambda|) of a carrying mode; "
                                        "None when an eigenvalue left the unit disc",
                                 nullable=True),
        "needed_from": Column(int, "the first window step the per-mode check needs; None when "
                                   "an eigenvalue left the unit disc", nullable=True),
        "norm_ratio": Column(float, "sqrt of the window's mean ||h_t||^2 over the closed form's "
                                    "E||h_t||^2 at the same steps for the layer's current "
                                    "system fed a temporally white input of the per-state "
                                    "energy the layer's actual input puts in (1: the input's "
                                    "time correlation does not move the norm)"),
        "energy_reached": Column(float, "unit white-noise energy at t_from over its stationary "
                                        "level, for the layer's current system (>= 0.9: the "
                                        "window is stationary)"),
        "memory": Column(int, "steps the layer's current system takes to reach 90% of its "
                              "stationary white-noise energy; None when an eigenvalue has left "
                              "the unit disc (no stationary level)", nullable=True),
    }),
    kinds={
        "layer": ("kind", "step", "layer", "norm_mean", "norm_std", "norm_min", "norm_max",
                  "norm_last"),
        "profile": ("kind", "step", "layer", "t", "norm", "examples"),
        "probe": ("kind", "step", "probe_loss"),
        "stationary": ("kind", "step", "layer", "norm_stationary", "t_from", "t_to",
                       "examples", "lengthened"),
        **TRAINING_KINDS,
    },
    optional={"layer": ("grad_norm", "lam_min", "lam_median", "lam_max"),
              "stationary": ("norm_ratio", "energy_reached", "memory", "source", "norm_rms",
                             "input_rms", "drive_rms", "gain", "settled", "unsettled_share",
                             "memory_slowest", "needed_from")},
)

# --------------------------------------------------------------------------------------------
# Configuration

LR_SOURCES: tuple[str, ...] = ("selected", "recipe")


@dataclasses.dataclass(frozen=True)
class StabilityConfig:
    """The stability study's configuration.

    Attributes:
        tasks: task registry keys (ListOps as the paper, and at least one other).
        task_preset: which of each task's presets (`tasks.preset_options`) sizes the data.
        variants: keys of `harness.variants.variants()` (default: every variant whose model
            declares hidden states).
        depths: network depths measured at initialisation (the depth sweep).
        train_depths: depths that are also trained (each must be in ``depths``; the trained
            run's step-0 rows are its initialisation).
        train_tasks: the tasks on which ``train_depths`` are trained; ``()`` means every task
            (the others are measured at initialisation only).
        seeds: one run per seed (initialisation, batch order).
        d_model, d_state: every layer's width and ``d_state`` (the layer's own convention:
            RotRNN's N real dimensions, the LRU's and S5's complex states, S4D's states per
            channel).
        heads: the number of heads of every layer that has a ``heads`` option; 0 (the
            default) takes each registration's (its options for the task, then its
            ``width_options``), as the accuracy study does, so that the networks measured here
            are the ones whose accuracy the report shows.
        layer_options: options for every layer whose config has them (``layer.<option>=`` on
            the command line), above the registration's and below each variant's own.
        steps, eval_every, batch_size, lr, recurrent_lr: the training recipe
            (`harness.train.TrainConfig`; the other fields keep its defaults).
        lr_source: ``"selected"``: each trained run takes the learning rates the accuracy
            study selected for its model and task (`harness.report.selection.tuned_rates`:
            the report's tuned pair, from the store the study is run with) where the store
            holds a tuned cell, ``lr``/``recurrent_lr`` otherwise; ``"recipe"``: always
            ``lr``/``recurrent_lr``. Each run records which it used (``lr_source``), and its
            rates are in its spec, so a new selection makes new runs.
        selected_rates: ``(model, task, depth, lr, recurrent_lr)`` of the accuracy study's
            tuned cells, read from the store when the study runs (`bind`); a run at a depth
            the accuracy study did not train takes the cell of the nearest depth.
        probe_size: examples in the fixed probe batch.
        profile_points: steps stored per norm-over-time profile.
        statistics: how BatchNorm normalises the layers' inputs when measuring: ``"batch"``
            (the probe batch's statistics, as in training) or ``"running"`` (the running
            statistics of inference mode); see `stability_probe.state_norms`.
        group_seeds: train the seeds of one trained configuration together as one program
            (`harness.train.train_group`: the same runs and rows up to float round-off);
            false trains every run alone.
            Off by default: measured at the cpu preset in two workers (benchmarks/README.md)
            groups were no faster than the seeds one by one, so the presets keep separate
            runs.
        long_probe: where the long probe's sequences come from (`LongProbe`): ``"stream"``
            (the training split's examples back to back, at the first length of
            `stability_probe.stream_ladder` (``probe_length`` to 8 times it) that the per-mode
            regime check needs) or
            ``"generator"`` (the task's generator at ``probe_length`` to ``2 * probe_length``
            steps, `tasks.lengthened`: out of the training distribution; a task that cannot
            draw longer sequences falls back to the probe batch, rows say
            ``lengthened=False``).
        probe_length: the long probe's shortest sequence (above).
        long_probe_size: examples in the long probe (forward only).
        window: the fraction of each long-probe example's last steps over which the
            stationary norm is averaged.
        init_seeds: the seeds of the runs measured at initialisation only (the depths not
            trained); ``()`` (the default) takes ``seeds``. Cheap (a forward pass each, one
            compiled program per variant and depth), so a preset can afford more of them than
            of trained runs.
        sweep_heads: the initialisation sweep: head counts at which every variant whose layer
            has a ``heads`` option is also measured at initialisation, at the deepest of
            ``depths``, for each of ``init_seeds`` (the registration's own head count is the
            study's ordinary run). With the probe batch (the task's own lengths) and the long
            probe every run measures, and the layers 1..d of the deepest network standing for
            a network of depth d, it shows where each layer's spread comes from before any
            training: head count x probe length x depth. ``()``: no sweep.
    """

    tasks: tuple[str, ...] = ("listops", "digits")
    task_preset: Literal["smoke", "cpu", "gpu"] = "cpu"
    variants: tuple[str, ...] = dataclasses.field(default_factory=lambda: entering_variants())
    depths: tuple[int, ...] = (1, 2, 4, 8)
    train_depths: tuple[int, ...] = (4,)
    train_tasks: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0, 1, 2)
    d_model: int = 32
    d_state: int = 32
    heads: int = 0
    steps: int = 300
    eval_every: int = 50
    batch_size: int = 32
    lr: float = 3e-3
    recurrent_lr: float = 1e-3
    lr_source: Literal["selected", "recipe"] = "selected"
    selected_rates: tuple[tuple[str, str, int, float, float], ...] = ()
    layer_options: tuple[tuple[str, Any], ...] = ()
    probe_size: int = 32
    profile_points: int = 16
    statistics: Statistics = "batch"
    group_seeds: bool = False
    long_probe: Literal["stream", "generator"] = "stream"
    # 1000 to 8000 (stream): RotRNN's slowest heads at initialisation (gamma near 0.999)
    # remember about 1000 steps, so their three memories need a window opening near step 3000.
    probe_length: int = 1000
    long_probe_size: int = 16
    window: float = 0.1
    init_seeds: tuple[int, ...] = ()
    sweep_heads: tuple[int, ...] = ()

    def __post_init__(self):
        if not isinstance(self.group_seeds, bool):
            raise ValueError(
                f"stability.group_seeds must be true or false; got {self.group_seeds!r}.")
        if not self.tasks or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"stability.tasks must be distinct and non-empty, got {self.tasks!r}.")
        unknown = [t for t in self.tasks if t not in tasks.names()]
        if unknown:
            raise ValueError(
                f"stability.tasks has unknown task(s) {unknown}; accepted: {tasks.names()}."
            )
        if self.task_preset not in tasks.PRESETS:
            raise ValueError(
                f"stability.task_preset={self.task_preset!r}; accepted: {list(tasks.PRESETS)}."
            )
        check_variants("stability.variants", self.variants)
        barred = {v: skip_reason(models.info(variant(v).model)) for v in self.variants}
        barred = {v: why for v, why in barred.items() if why}
        if barred:
            raise ValueError(
                "stability.variants cannot include "
                + "; ".join(f"{v} ({why})" for v, why in barred.items())
                + f"; accepted: {list(entering_variants())}."
            )
        if self.statistics not in STATISTICS:
            raise ValueError(
                f"stability.statistics={self.statistics!r}; accepted: {list(STATISTICS)}."
            )
        for name in ("depths", "seeds"):
            value = getattr(self, name)
            if not value or len(set(value)) != len(value):
                raise ValueError(f"stability.{name} must be distinct and non-empty, got {value!r}.")
        for name in ("init_seeds", "sweep_heads"):
            value = getattr(self, name)
            if len(set(value)) != len(value):
                raise ValueError(f"stability.{name} must be distinct (or empty), got {value!r}.")
        for seed in (*self.seeds, *self.init_seeds):
            validation.non_negative_int("stability seeds", seed)
        for heads in self.sweep_heads:
            validation.positive_int("stability.sweep_heads", heads)
        for depth in self.depths:
            validation.positive_int("stability.depths", depth)
        stray = [d for d in self.train_depths if d not in self.depths]
        if stray or len(set(self.train_depths)) != len(self.train_depths):
            raise ValueError(
                f"stability.train_depths={self.train_depths!r} must be distinct members of "
                f"stability.depths={self.depths!r}."
            )
        stray = [t for t in self.train_tasks if t not in self.tasks]
        if stray or len(set(self.train_tasks)) != len(self.train_tasks):
            raise ValueError(
                f"stability.train_tasks={self.train_tasks!r} must be distinct members of "
                f"stability.tasks={self.tasks!r} (or empty: every task)."
            )
        validation.non_negative_int("stability.heads", self.heads)
        for name in ("d_model", "d_state", "steps", "eval_every", "batch_size",
                     "probe_size", "profile_points", "probe_length", "long_probe_size"):
            validation.positive_int(f"stability.{name}", getattr(self, name))
        if self.lr_source not in LR_SOURCES:
            raise ValueError(
                f"stability.lr_source={self.lr_source!r}; accepted: {list(LR_SOURCES)}."
            )
        if self.long_probe not in LONG_PROBES:
            raise ValueError(f"stability.long_probe={self.long_probe!r}; accepted: "
                             f"{list(LONG_PROBES)}.")
        if not 0.0 < self.window <= 1.0:
            raise ValueError(f"stability.window must lie in (0, 1], got {self.window!r}.")
        for name in ("lr", "recurrent_lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"stability.{name} must be positive, got {getattr(self, name)!r}.")
        self._check_long_probe()

    def _check_long_probe(self) -> None:
        """Refuse a ``probe_length`` no run could probe at, before any training: one a task's
        generator cannot draw (its config refuses the lengthened options), or one whose
        arrays cannot fit in this machine's memory (`long_probe_bytes`). A task that cannot
        make longer sequences probes its own batch and leaves it out of both."""
        lengthened, longest = list(self.tasks), stream_ladder(self.probe_length)[-1]
        if self.long_probe == "generator":
            lengthened, longest = self._generated_tasks(), 2 * self.probe_length
        need = long_probe_bytes(self.long_probe_size, longest, self.d_model, self.d_state)
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if lengthened and need > memory:
            raise ValueError(
                f"stability.probe_length={self.probe_length}: the long probe of "
                f"{', '.join(lengthened)} ({self.long_probe_size} sequences of up to "
                f"{longest} steps, d_model={self.d_model}, "
                f"d_state={self.d_state}) needs at least {need / 2**30:.1f} GiB, more than "
                f"this machine's {memory / 2**30:.1f} GiB of memory; lower "
                "stability.probe_length (or stability.long_probe_size).")

    def _generated_tasks(self) -> list[str]:
        """The tasks whose generator draws the long probe (``long_probe="generator"``); refuse
        a ``probe_length`` one of them cannot draw."""
        lengthened = []
        for task in self.tasks:
            options = tasks.preset_options(task, self.task_preset)
            longer = tasks.lengthened(task, options, self.probe_length, self.long_probe_size)
            if longer is None:
                continue
            try:
                tasks.make_config(task, **longer)
            except ValueError as e:
                raise ValueError(
                    f"stability.probe_length={self.probe_length}: task {task!r} cannot draw "
                    f"sequences of {self.probe_length} to {2 * self.probe_length} steps "
                    f"({str(e).rstrip('.')}); "
                    "lower stability.probe_length.") from e
            lengthened.append(task)
        return lengthened


@dataclasses.dataclass(frozen=True)
class StabilityRun:
    """One run: a variant on a task at one depth and seed; ``train`` is None at init only,
    and ``lr_source`` says where a trained run's learning rates come from (``"selected"``: the
    accuracy study's selection; ``"recipe"``: the study's ``lr``/``recurrent_lr``)."""

    task: str
    task_options: tuple[tuple[str, Any], ...]
    variant: str
    network: NetworkConfig
    train: training.TrainConfig | None
    lr_source: str | None
    probe_size: int
    profile_points: int
    statistics: Statistics
    seed: int
    probe_length: int = 1000
    long_probe_size: int = 16
    window: float = 0.1
    long_probe: str = "stream"
    # True for a run of the initialisation sweep at a head count other than the study's
    # (`StabilityConfig.sweep_heads`): the report keeps it out of everything but the sweep.
    # Left out of the run's identity while False, so no earlier run id changed.
    sweep: bool = dataclasses.field(default=False, metadata={_config.OMIT_DEFAULT: True})


def grid(config: StabilityConfig) -> list[StabilityRun]:
    """Every task, variant, depth and seed (``init_seeds`` at the depths measured at
    initialisation only); depths in ``train_depths`` are trained on the tasks of
    ``train_tasks``; then the initialisation sweep (`sweep_runs`). Each run's settings come
    from `resolve`."""
    runs = []
    for task in config.tasks:
        trained = not config.train_tasks or task in config.train_tasks
        for name in config.variants:
            for depth in config.depths:
                resolved, lr_source = resolve(config, name, task, depth)
                is_trained = depth in config.train_depths and trained
                seeds = config.seeds if is_trained else (config.init_seeds or config.seeds)
                runs += [_run(config, task, name, resolved, seed,
                              lr_source if is_trained else None, trained=is_trained)
                         for seed in seeds]
    return runs + sweep_runs(config)


def sweep_runs(config: StabilityConfig) -> list[StabilityRun]:
    """The initialisation sweep's own runs: every variant whose layer has a ``heads`` option,
    at the deepest depth and at each head count of ``sweep_heads`` other than the one its
    ordinary runs resolve to, measured at initialisation for each of ``init_seeds``."""
    depth = max(config.depths)
    runs = []
    for task in config.tasks:
        for name in config.variants:
            if "heads" not in models.info(variant(name).model).option_names():
                continue
            ordinary = dict(resolve(config, name, task, depth)[0].network.layer_options)
            for heads in config.sweep_heads:
                if heads == ordinary.get("heads"):
                    continue
                resolved, _ = resolve(config, name, task, depth, heads=heads)
                runs += [dataclasses.replace(_run(config, task, name, resolved, seed, None,
                                                  trained=False), sweep=True)
                         for seed in (config.init_seeds or config.seeds)]
    return runs


def _run(config: StabilityConfig, task: str, name: str, resolved: settings.Resolved, seed: int,
         lr_source: str | None, *, trained: bool) -> StabilityRun:
    return StabilityRun(
        task=task, task_options=resolved.task_options, variant=name, network=resolved.network,
        train=resolved.train if trained else None, lr_source=lr_source,
        probe_size=config.probe_size, profile_points=config.profile_points,
        statistics=config.statistics, seed=seed, probe_length=config.probe_length,
        long_probe_size=config.long_probe_size, window=config.window,
        long_probe=config.long_probe)


def resolve(config: StabilityConfig, name: str, task: str, depth: int, *, heads: int = 0
            ) -> tuple[settings.Resolved, str]:
    """Variant ``name``'s settings on ``task`` at ``depth`` (`harness.settings.resolve`, the
    accuracy study's order: the task preset, the model's registration for the task, its width
    options, then ``heads``, ``layer_options``, the variant's own options and the selected
    learning rates), and where its learning rates come from: ``"selected"`` or ``"recipe"``.
    ``heads`` (the initialisation sweep's) sets the layer's head count above the variant's
    own options."""
    chosen = variant(name)
    recipes = []
    if config.heads:
        recipes.append(settings.Recipe(overrides=(("layer.heads", config.heads),),
                                       source="stability.heads"))
    if config.layer_options:
        recipes.append(settings.Recipe(
            overrides=tuple((f"layer.{k}", v) for k, v in config.layer_options),
            source="stability.layer_options"))
    if chosen.options:
        recipes.append(settings.Recipe(
            model=chosen.model, overrides=tuple((f"layer.{k}", v) for k, v in chosen.options),
            source=f"variant {name}: {chosen.note}"))
    if heads:
        recipes.append(settings.Recipe(model=chosen.model, overrides=(("layer.heads", heads),),
                                       source="stability.sweep_heads"))
    rates = _selected_rates(config, chosen.model, task, depth)
    if rates is not None:
        recipes.append(settings.Recipe(
            overrides=(("train.lr", rates[0]), ("train.recurrent_lr", rates[1])),
            source="the accuracy study's selected learning rates"))
    train = training.TrainConfig(steps=config.steps, batch_size=config.batch_size, lr=config.lr,
                                 recurrent_lr=config.recurrent_lr, eval_every=config.eval_every)
    network = NetworkConfig(layer=chosen.model, depth=depth, d_model=config.d_model,
                            d_state=config.d_state)
    resolved = settings.resolve(chosen.model, task, task_preset=config.task_preset,
                                network=network, train=train, recipes=recipes,
                                where=f"stability run ({name}, {task})")
    return resolved, "recipe" if rates is None else "selected"


def _selected_rates(config: StabilityConfig, model: str, task: str, depth: int
                    ) -> tuple[float, float] | None:
    """The accuracy study's selected (lr, recurrent_lr) for ``model`` on ``task``: its cell
    at ``depth``, else at the nearest depth (the shallower on a tie); None when
    ``lr_source="recipe"`` or the store held no tuned cell for them."""
    if config.lr_source != "selected":
        return None
    cells = {d: (lr, rlr) for m, t, d, lr, rlr in config.selected_rates if (m, t) == (model, task)}
    if not cells:
        return None
    return cells[min(cells, key=lambda d: (abs(d - depth), d))]


def bind(config: StabilityConfig, store: Any) -> StabilityConfig:
    """``config`` with ``selected_rates`` read from ``store`` (`Study.from_store`): the
    accuracy study's tuned cells, as its report selects them; unchanged with
    ``lr_source="recipe"``."""
    if config.lr_source != "selected":
        return config
    from ...report.selection import tuned_rates

    rates = tuned_rates(store)
    return dataclasses.replace(config, selected_rates=tuple(
        (m, t, d, lr, rlr) for (m, t, d), (lr, rlr) in sorted(rates.items())))

# --------------------------------------------------------------------------------------------
# Running: the measurement itself is `harness.studies.stability_probe`


def _finite(rows: list[dict[str, Any]]) -> bool:
    return all(
        np.isfinite(v) for r in rows for v in r.values() if isinstance(v, float)
    )


def _long(spec: StabilityRun) -> dict[str, Any]:
    return dict(task=spec.task, options=spec.task_options, length=spec.probe_length,
                size=spec.long_probe_size, window=spec.window, source=spec.long_probe)


def run(spec: StabilityRun) -> list[dict[str, Any]]:
    """Measure one network at initialisation, or at every evaluation of its training."""
    task = tasks.build(spec.task, **dict(spec.task_options))
    eigenvalues = models.info(spec.network.layer).has(models.DISCRETE_SYSTEM)
    if spec.train is None:
        probe = Probe(task, spec.probe_size, spec.profile_points, statistics=spec.statistics,
                      gradients=False, eigenvalues=eigenvalues, long=_long(spec))
        # The same key as `harness.train.train` draws its network from, so a depth's
        # initialisation-only run and its trained run start from the same parameters.
        network, state = training.build_network(
            spec.network, task.info, key=jr.fold_in(jr.PRNGKey(spec.seed), 0)
        )
        rows = probe(0, network, state)
        if not _finite(rows):
            raise Diverged("non-finite state norm or eigenvalue at initialisation", rows, step=0)
        return rows
    probe = Probe(task, spec.probe_size, spec.profile_points, statistics=spec.statistics,
                  eigenvalues=eigenvalues, long=_long(spec))
    result = training.train(spec.network, task, spec.train, seed=spec.seed, on_eval=probe)
    return result.rows


def group(config: StabilityConfig, spec: StabilityRun) -> StabilityRun | None:
    """The seed group a trained run trains in (`Study.group`): the runs equal to it but for the
    seed; None (alone) for a run at initialisation only, or when ``group_seeds`` is off."""
    if spec.train is None or not config.group_seeds:
        return None
    return dataclasses.replace(spec, seed=0)


def run_group(specs: list[StabilityRun]) -> list[list[dict[str, Any]] | Exception]:
    """Train the seeds of one group together (`Study.run_group`), each probed as `run` probes
    it; each run's rows, or its `Diverged`."""
    first = specs[0]
    task = tasks.build(first.task, **dict(first.task_options))
    eigenvalues = models.info(first.network.layer).has(models.DISCRETE_SYSTEM)
    probe = Probe(task, first.probe_size, first.profile_points, statistics=first.statistics,
                  eigenvalues=eigenvalues, long=_long(first))
    results = training.train_group(first.network, task, first.train,
                                   seeds=[s.seed for s in specs], on_eval=probe)
    return [r if isinstance(r, Exception) else r.rows for r in results]


def programs(spec: StabilityRun) -> tuple[Any, ...]:
    """What decides the programs a run compiles (`Study.programs`): everything but the seed
    and the recipe's numbers, which are data of the compiled step."""
    train = None if spec.train is None else (spec.train.batch_size, spec.train.eval_batch_size,
                                             spec.train.clip_norm is None)
    return (spec.task, spec.task_options, spec.network, train, spec.probe_size,
            spec.profile_points, spec.statistics, spec.probe_length, spec.long_probe_size,
            spec.long_probe)


PRESETS = read_presets(__name__, StabilityConfig)

def take_layer_options(config: StabilityConfig, options: Mapping[str, str]
                       ) -> StabilityConfig:
    """``config`` with the command line's ``layer.<option>`` values in its `layer_options`
    (replacing the same options there)."""
    merged = {**dict(config.layer_options), **options}
    return dataclasses.replace(config, layer_options=tuple(merged.items()))


STUDY = Study(
    name="stability",
    description="Hidden-state norm per layer at initialisation and in training, across depth "
    "and seeds.",
    presets=PRESETS,
    grid=grid,
    run=run,
    planner=f"{__name__}.plan:plan",
    section=f"{__name__}.report:SECTION",
    # 2: BatchNorm's statistics over valid steps only (`models.network`), which the probe uses.
    # 3: one length bucket for tasks shorter than 128 tokens (`harness.train.BUCKET_SPACING`).
    # 4: the long (stationary) probe's rows.
    # 5: the long probe streams training examples, its length from the per-mode regime check;
    # the input, drive and gain columns.
    version=5,
    skip_reason=skip_reason,
    programs=programs,
    group=group,
    run_group=run_group,
    from_store=bind,
    take_layer_options=take_layer_options,
)
