"""The command line, ``linrnn-bench``: a thin layer over the registries and the runner.

    linrnn-bench list [models|tasks|studies|presets]
    linrnn-bench train model=lru task=digits [seed=0 | seeds=0,1,2] [--preset P]
                            [network.d_model=64 layer.r_min=0.5 ...] [--explain]
    linrnn-bench study NAME [--preset P] [key=value ...] [--fresh] [--store PATH]
                                 [--executor local|processes|ray] [--workers N]
                                 [--ray-address ADDR]
    linrnn-bench report [--run] [--preset P] [--executor E] [--workers N] [--store PATH]
                             [--out reports] [--only NAME ...]
    linrnn-bench figure NAME [NAME ...] [--store PATH] [--out reports]
    linrnn-bench check-layer MODEL [--d-model H] [--d-state N] [--long-length L]
    linrnn-bench compare MODEL [--reference reports/cpu-full] [--store PATH] [--out DIR]
                            [--executor E] [--workers N]
    linrnn-bench plan --preset P [--device NAME] [--peak-flops F --bandwidth B]
    linrnn-bench rehearse --preset P [--study NAME ...] [--match TEXT] [--limit N]

A MODEL is a registry name or an outside layer's import path ``package.module:Layer``.

Every ``key=value`` is validated by the config it lands in; an unknown key, a bad value or an
unknown name prints one line and exits with status 2. ``train``'s ``key=value`` overrides win
over the preset's per-task recipes (it says which setting each replaced); ``train --explain``
prints each effective option of the run, its value and where it came from (`harness.settings`),
and trains nothing. ``report``'s ``--preset``, ``--executor`` and ``--ray-address`` apply only
with ``--run``.

One spelling per setting: a preset is named with ``--preset P`` and a layer's option is set
as ``layer.<option>=value`` (``train`` and ``study``); ``preset=P``, ``network.layer.<option>=``,
``network.layer_options=`` and ``layer_options=`` are refused with the spelling to use
(`check_spelling`).

Exit status: 0 done; 1 a run failed (it raised: recorded with its error, retried next time; a
diverged run is a result and does not count), a worker died, the disk filled or the report
could not be written; 2 a usage, configuration or store error (nothing ran); 130 interrupted.

Results go to the store (default ``results/store.sqlite``); run checkpoints go to
``checkpoints/`` beside it, and compiled XLA programs to ``.cache/jax`` (``LINRNN_JAX_CACHE``;
empty to switch the cache off).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, NoReturn

from . import config as _config
from .errors import ConfigError, ExecutorError, StoreError
from .executors import EXECUTORS
from .measure import lifetime
from .store import DEFAULT_PATH, Store

USAGE_ERROR = 2
RUNS_FAILED = 1
REPORT_INCOMPLETE = 1  # the report is in place, but a section raised or a file failed to write
_PRESET_LINES = {
    "smoke": "seconds: tiny sizes, used by the tests",
    "cpu": "minutes on two CPU cores: the default of `make report`",
    "cpu-full": "about an hour on two CPU cores: 12 seeds (10 held out), six tasks, depth 6",
    "gpu": "the papers' configurations, for an accelerator",
}
_TRAIN_KEYS = ("model", "task", "seed", "seeds")
_TRAIN_COLUMNS = ("kind", "step", "lr", "train_loss", "val_loss", "val_accuracy", "best_step",
                  "test_loss", "test_accuracy", "params", "train_seconds")


EXIT_STATUS = (
    "exit status: 0 done; 1 a run failed (it raised; recorded with its error and retried next "
    "time; a diverged run is a result and does not count), a worker died, the disk filled or "
    "the report could not be written; 2 a usage, configuration or store error (nothing ran); "
    "130 interrupted."
)


class UsageError(Exception):
    """A mistake on the command line; printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see python -m {self.prog} --help)")


def check_spelling(items: Sequence[str]) -> None:
    """Refuse a ``key=value`` item that spells a setting another way than the one the command
    line takes, with a `UsageError` naming the spelling to use: a preset is ``--preset P`` (an
    option, like ``--store``), a layer's option ``layer.<option>=value``. One spelling per
    setting keeps the docs, the examples and a researcher's notes alike."""
    for item in items:
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals:
            continue  # not a setting; `harness.config.parse_overrides` says what it should be
        if key == "preset":
            raise UsageError(f"{item}: name the preset with --preset {value}.")
        if key.startswith("network.layer."):
            raise UsageError(f"{item}: set the layer's option as "
                             f"layer.{key.removeprefix('network.layer.')}={value}.")
        if key in ("network.layer_options", "layer_options"):
            raise UsageError(f"{item}: set each of the layer's options as "
                             f"layer.<option>=value{_as_layer_items(value)}.")


def _as_layer_items(text: str) -> str:
    """``": layer.a=1 layer.b=2"`` for an options text ``"a=1,b=2"``; empty for a text that is
    not such a list (the hint then gives the form alone)."""
    try:
        pairs = _config.parse_pairs(text, "layer_options")
    except ConfigError:
        return ""
    return ": " + " ".join(f"layer.{option}={value}" for option, value in pairs.items())


def console() -> NoReturn:
    """The ``linrnn-bench`` command (and ``python -m linrnn_bench``): `main`, with the folder
    it runs in first on ``sys.path`` as ``python -m`` has it, so that a layer given by import
    path (``my_layers:MyLayer``) is found in the researcher's own repository either way. An
    interrupted command ends without the interpreter's teardown
    (`harness.measure.lifetime.exit_interrupted`)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    status = main()
    if status == lifetime.INTERRUPTED:
        lifetime.exit_interrupted()
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv``; returns the exit status (0 ok, 1 a run or write failed,
    2 a usage, configuration or store error, 130 interrupted; see the module docstring).

    Ctrl-C and SIGTERM (kill, a scheduler's time limit) stop any command within seconds
    (`harness.measure.lifetime.stop_signals`): the runs finished are in the store, the runs in
    flight and their worker processes are ended, and nothing is half-written."""
    try:
        with lifetime.stop_signals():
            return _main(argv)
    except KeyboardInterrupt:  # a stop in the instant after `_main` had returned
        return lifetime.INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    try:
        # Inside the try: building the parser imports much, and a stop may come meanwhile.
        parser = _build_parser()
        # key=value overrides may come before or after the options (argparse alone would stop
        # collecting them at the first option).
        args, extra = parser.parse_known_args(argv)
        check_spelling([*getattr(args, "overrides", ()), *extra])
        unknown = [e for e in extra if e.startswith("-") or not hasattr(args, "overrides")]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if extra:
            args.overrides = [*args.overrides, *extra]
        return args.handler(args)
    except (UsageError, ConfigError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return _interrupted()
    except Exception as e:
        # After a stop, an exception is the stop's KeyboardInterrupt turned into another, or
        # a worker the same signal ended (sent to the whole process group).
        if lifetime.stop_requested():
            return _interrupted()
        return _failed(e)


def _failed(error: Exception) -> int:
    """The exit status of a command that raised ``error``, after printing its one line; an
    error of no kind below is raised again (a bug: its traceback is wanted)."""
    if isinstance(error, ExecutorError):  # e.g. a worker process died: what finished is kept
        print(f"error: {error}", file=sys.stderr)
        return 1
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        where = f" (writing {error.filename})" if error.filename else ""
        print(f"error: the disk is full{where}. Finished runs are in the store; free space "
              "and rerun the command to resume.", file=sys.stderr)
        return 1
    raise error


def _interrupted() -> int:
    print("interrupted: finished runs are in the store; rerun the command to resume.",
          file=sys.stderr)
    return lifetime.INTERRUPTED


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="linrnn-bench", description=__doc__.split("\n")[0], epilog=EXIT_STATUS)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="list models, tasks, studies or presets")
    p.add_argument("what", nargs="?", default="all",
                   choices=("all", "models", "tasks", "studies", "presets"))
    p.set_defaults(handler=_cmd_list)

    p = sub.add_parser("train", help="one training run from key=value overrides",
                       epilog=EXIT_STATUS)
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.add_argument("--store", type=Path, default=DEFAULT_PATH)
    p.add_argument("--fresh", action="store_true", help="rerun even if recorded")
    p.add_argument("--preset", default="cpu", help="the accuracy study's preset (default cpu)")
    p.add_argument("--explain", action="store_true",
                   help="print each effective option, its value and its source; train nothing")
    p.set_defaults(handler=_cmd_train)

    p = sub.add_parser("study", help="run a study's grid at a preset", epilog=EXIT_STATUS)
    p.add_argument("name")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.add_argument("--preset", default="cpu", help="the preset (default cpu)")
    p.add_argument("--fresh", action="store_true", help="rerun finished runs too")
    _executor_arguments(p)
    p.add_argument("--store", type=Path, default=DEFAULT_PATH)
    p.set_defaults(handler=_cmd_study)

    p = sub.add_parser("report", help="render the report from the store (--run: run studies first)",
                       epilog=EXIT_STATUS)
    p.add_argument("--run", action="store_true", help="run every registered study first")
    # Collected only to refuse them with a line saying where settings go (`_cmd_report`).
    p.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    # No defaults here: --preset, --executor and --ray-address apply only with --run, and one
    # given without it is refused rather than ignored (`_report_run_options`).
    p.add_argument("--preset", default=None, help="with --run: the studies' preset (cpu)")
    _executor_arguments(p, executor_default=None)
    p.add_argument("--store", type=Path, default=DEFAULT_PATH)
    p.add_argument("--out", type=Path, default=Path("reports"))
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="write this table or figure alone (repeatable)")
    p.set_defaults(handler=_cmd_report)

    p = sub.add_parser("figure", help="regenerate one table or figure from the store alone")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--store", type=Path, default=DEFAULT_PATH)
    p.add_argument("--out", type=Path, default=Path("reports"))
    p.set_defaults(handler=_cmd_figure, run=False, preset=None, executor=None, workers=1,
                   ray_address=None)

    _check_layer_parser(sub)
    _plan_parsers(sub)
    _compare_parser(sub)
    return parser


def _plan_parsers(sub) -> None:
    """``plan`` and ``rehearse`` (`harness.plan`)."""
    from .plan import DEVICES

    p = sub.add_parser("plan", help="a preset's runs, programs, memory and roofline lower-bound "
                                    "time per study, before running it")
    p.add_argument("--preset", default="gpu")
    p.add_argument("--device", default=None, choices=tuple(DEVICES),
                   help="price for this accelerator's published peaks (default: this machine, "
                        "peaks measured now)")
    p.add_argument("--peak-flops", type=float, default=None, help="peak FLOP/s (replaces the "
                   "device's; with --bandwidth alone, a device of these peaks)")
    p.add_argument("--bandwidth", type=float, default=None, help="memory bandwidth, bytes/s")
    p.add_argument("--memory", type=float, default=None, help="device memory, bytes")
    p.add_argument("--study", action="append", default=None, help="only this study (repeatable)")
    p.add_argument("--no-compile", action="store_true",
                   help="analytic counts only: no XLA costs or memory (fast)")
    p.add_argument("--store", type=Path, default=DEFAULT_PATH)
    p.set_defaults(handler=_cmd_plan)

    p = sub.add_parser("rehearse", help="build, compile and run every program of a preset for "
                                        "two steps here, and generate its tasks")
    p.add_argument("--preset", default="gpu")
    p.add_argument("--study", action="append", default=None, help="only this study (repeatable)")
    p.add_argument("--match", default=None, help="only programs whose label contains this")
    p.add_argument("--limit", type=int, default=None, help="only the first N programs")
    p.add_argument("--task-examples", type=int, default=None,
                   help="generate at most N examples per split (the full time extrapolated)")
    p.add_argument("--no-tasks", action="store_true", help="rehearse the programs only")
    p.set_defaults(handler=_cmd_rehearse)


def _plan_selection(args) -> None:
    from . import studies

    _check_preset(args.preset)
    for name in args.study or ():
        if name not in studies.names():
            raise UsageError(f"Unknown study {name!r}; accepted: {', '.join(studies.names())}.")


def _cmd_plan(args) -> int:
    from . import plan

    _plan_selection(args)
    try:
        if args.device is None and args.peak_flops is None and args.bandwidth is None:
            target = plan.local_target()
        else:
            target = plan.device_target(args.device, args.peak_flops, args.bandwidth,
                                        args.memory)
    except ValueError as e:
        raise UsageError(str(e)) from None
    store = Store(args.store, create=False, readonly=True) if args.store.exists() else None
    plans = plan.catalogue(args.preset, names=args.study, store=store)
    print(plan.plan_text(plans, target, preset=args.preset, compile=not args.no_compile,
                         progress=lambda line: print(line, file=sys.stderr, flush=True)))
    return 0


def _cmd_rehearse(args) -> int:
    from .measure.timing import Stopwatch

    from . import plan

    _plan_selection(args)
    for name in ("limit", "task_examples"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be a positive integer.")
    clock = Stopwatch()
    programs, tasks_, _ = plan.rehearse(
        args.preset, names=args.study, match=args.match, limit=args.limit,
        task_examples=args.task_examples, with_tasks=not args.no_tasks,
        progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(plan.rehearsal_text(programs, tasks_, preset=args.preset,
                              seconds=clock.elapsed()))
    return 0 if all(r.ok for r in (*programs, *tasks_)) else 1


def _check_layer_parser(sub) -> None:
    p = sub.add_parser(
        "check-layer",
        help="check a layer's contract (shapes, dtype, jit, grad, vmap, long L, capabilities) "
             "and which studies it can enter",
    )
    p.add_argument("model", help="a registry name or an import path package.module:Layer")
    p.add_argument("--d-model", type=int, default=4, help="H of the layer built (default 4)")
    p.add_argument("--d-state", type=int, default=8, help="its d_state (default 8)")
    p.add_argument("--long-length", type=int, default=4096,
                   help="L of the long-sequence check (default 4096)")
    p.set_defaults(handler=_cmd_check_layer)


def _cmd_check_layer(args) -> int:
    """Print the contract table; exit 1 if a check failed, 2 if the model cannot be resolved."""
    from .layer_check import check_layer, format_table

    for name in ("d_model", "d_state", "long_length"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be a positive integer.")
    try:
        checks = check_layer(args.model, d_model=args.d_model, d_state=args.d_state,
                             long_length=args.long_length)
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    print(format_table(checks))
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        print(f"{len(failed)} check(s) failed: {', '.join(failed)}.", file=sys.stderr)
        return 1
    return 0


def _executor_arguments(p: argparse.ArgumentParser, executor_default: str | None = "local"
                        ) -> None:
    p.add_argument("--executor", default=executor_default, choices=EXECUTORS,
                   help="where runs execute: this process (local), N worker processes on this "
                        "machine (processes), or a Ray cluster (ray)")
    p.add_argument("--workers", type=int, default=2,
                   help="worker processes of --executor processes, and of the report's "
                        "figure drawing (default 2)")
    p.add_argument("--ray-address", default=None)


def _executor(args):
    from .executors import make_executor

    try:
        return make_executor(args.executor, address=args.ray_address, workers=args.workers)
    except ExecutorError as e:
        raise UsageError(str(e)) from None


# --------------------------------------------------------------------------------------------
# Set-up shared by the commands that compute


def _prepare(store_path: Path) -> Store:
    """Open the store; put checkpoints beside it; switch on the persistent compilation cache."""
    from .train import CHECKPOINT_ENV

    from .runner import enable_compilation_cache

    os.environ.setdefault(CHECKPOINT_ENV, str(store_path.parent / "checkpoints"))
    _check_checkpoint_dir()
    store = Store(store_path)
    if store.readonly:  # found now, not after the first run has been computed
        raise StoreError(
            f"The store {store_path} is read-only for this user, so no run could be recorded. "
            "Make it writable (chmod u+w) or pass another path with --store."
        )
    enable_compilation_cache()
    return store


def _check_checkpoint_dir() -> None:
    """Refuse a checkpoint folder that is a file (or lies under one) before any run starts:
    every run would fail on it."""
    from .train import CHECKPOINT_ENV, checkpoint_dir

    folder = checkpoint_dir()
    for path in [folder, *folder.parents]:
        if path.exists() and not path.is_dir():
            raise UsageError(
                f"Runs keep their checkpoints in the folder {folder}, but {path} is a file. "
                f"Move the file aside, or set {CHECKPOINT_ENV} to another folder."
            )


def _study(name: str):
    from . import studies

    if name not in studies.names():
        raise UsageError(f"Unknown study {name!r}; accepted: {', '.join(studies.names())}.")
    try:
        return studies.get(name)
    except ModuleNotFoundError as e:
        if e.name != studies._REGISTRY[name]:
            raise
        raise UsageError(f"Study {name!r} is registered but {e.name} does not exist yet.") from None


def _check_preset(preset: str) -> None:
    from .studies import PRESET_NAMES

    if preset not in PRESET_NAMES:
        raise UsageError(f"Unknown preset {preset!r}; accepted: {', '.join(PRESET_NAMES)}.")


def _print_summary(summary) -> None:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items())) or "nothing to run"
    print(f"{summary.study}: {summary.total} runs, {summary.skipped} already recorded; "
          f"this time: {counts} ({summary.seconds:.1f} s).")


# --------------------------------------------------------------------------------------------
# Commands


def _cmd_list(args) -> int:
    what = args.what
    if what in ("all", "models"):
        _list_models()
    if what in ("all", "tasks"):
        _list_tasks()
    if what in ("all", "studies"):
        _list_studies()
    if what in ("all", "presets"):
        print("presets:")
        for name, line in _PRESET_LINES.items():
            print(f"  {name:<24} {line}")
    return 0


def _first_paragraph(text: str | None) -> str:
    """A docstring's summary: its first paragraph on one line (a wrapped sentence whole)."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


def _list_models() -> None:
    from linrnn_bench import models

    print("models:")
    for name in models.names():
        info = models.info(name)
        module = sys.modules[info.config_cls.__module__]
        origin = "" if info.origin == models.BUILTIN else f" [from {info.origin}]"
        print(f"  {name:<24} {_first_paragraph(module.__doc__)}{origin}")
    print("  (a layer of your own joins by import path, package.module:Layer, wherever a model "
          "is accepted: linrnn-bench check-layer package.module:Layer)")


def _list_tasks() -> None:
    from linrnn_bench import tasks

    print("tasks:")
    for name in tasks.names():
        print(f"  {name:<24} {tasks.describe(name)}")


def _list_studies() -> None:
    from . import studies

    print("studies:")
    for name in studies.names():
        try:
            line = _study(name).description
        except UsageError as e:
            line = f"(not available: {e})"
        print(f"  {name:<24} {line}")


def _cmd_train(args) -> int:
    from .runner import run_study

    from .studies import training as training_study

    training = training_study()  # its runs are stored as the study ``train``
    items = _config.parse_overrides(args.overrides)
    request = {k: items.pop(k) for k in _TRAIN_KEYS if k in items}
    preset = args.preset
    _check_preset(preset)
    seeds = _train_seeds(request)
    model = _train_model(request.get("model"), items.pop("network.layer", None))
    extra, rest = _train_recipe_items(items)
    base = training.config(preset, rest)  # validates the network.* and train.* keys
    model, task = model or base.models[0], request.get("task", base.tasks[0])
    _note_replaced(base.recipes, {**rest, **dict(extra)}, model, task, preset)
    config = _train_config(training, base, model, task, seeds, extra + tuple(rest.items()))
    study = dataclasses.replace(training, name="train")
    specs = _grid(study, config)
    if args.explain:
        _explain(training.resolve_run(config, model, task), model, task, preset, seeds)
        return 0
    store = _prepare(args.store)
    summary = run_study(study, config, store=store, fresh=args.fresh)
    _print_summary(summary)
    return _runs_failed(_print_train_runs(store, study, specs), args.store)


def _train_seeds(request: dict[str, str]) -> tuple[int, ...]:
    """The seeds of ``train``'s ``seed=N`` or ``seeds=N,M,...`` (0 when neither is given),
    each checked. Several seeds train together as one program (a seed group), one run each."""
    if "seed" in request and "seeds" in request:
        raise UsageError("train takes seed=N or seeds=N,M,... (trained together), not both.")
    key = "seeds" if "seeds" in request else "seed"
    seeds = _config.parse_value(request.get(key, "0"), tuple[int, ...] if key == "seeds" else int,
                                f"train.{key}")
    seeds = seeds if key == "seeds" else (seeds,)
    for seed in seeds:
        _config.check_seed(seed, f"train.{key}")
    return seeds


def _train_recipe_items(items: dict[str, str]
                        ) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    """``train``'s remaining ``key=value`` items split into the ``task.*`` and ``layer.*``
    pairs and the config keys (``network.*``, ``train.*``); any other key is a `UsageError`
    listing the accepted ones.

    The task's and layer's pairs become a recipe for this one run, parsed by the task's and
    the layer's config classes once the model is known.
    """
    layer = _layer_options(items)
    extra = tuple((k, v) for k, v in items.items() if k.startswith("task.")) + tuple(
        (f"layer.{k}", v) for k, v in layer.items())
    rest = {k: v for k, v in items.items() if not k.startswith(("task.", "layer."))}
    unknown = sorted(k for k in rest if k.partition(".")[0] not in ("network", "train"))
    if unknown:
        raise UsageError(
            f"Unknown key(s) {unknown} for train; accepted: {', '.join(_TRAIN_KEYS)}, "
            "network.<field>, train.<field>, task.<option>, layer.<option>."
        )
    return extra, rest


def _note_replaced(recipes, given: dict[str, str], model: str, task: str, preset: str) -> None:
    """Print a note for each of the preset's recipes for this run whose setting a command-line
    key in ``given`` replaces: the command line's recipe applies last, so an explicit override
    wins over the preset's per-task recipes (the cpu preset's ListOps steps), as the
    documented order of settings says."""
    for recipe in recipes:
        replaced = sorted({k for k, _ in recipe.overrides} & set(given))
        if replaced and recipe.applies(model, task):
            print(f"note: {', '.join(f'{k}={given[k]}' for k in replaced)} from the command line "
                  f"replace(s) the {preset} preset's setting for {task} ({recipe.source}).")


def _train_config(study, base, model: str, task: str, seeds: tuple[int, ...],
                  overrides: tuple[tuple[str, str], ...]):
    """``base`` narrowed to ``train``'s one run, as the training study declares
    (`Study.one_run`): ``model`` on ``task`` with ``seeds`` and the command line's
    ``overrides`` last. A bad value is a `UsageError`."""
    if study.one_run is None:
        raise UsageError(f"Study {study.name!r} declares no one run (Study.one_run) to train.")
    try:
        return study.one_run(base, model, task, seeds, overrides)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _print_train_runs(store, study, specs) -> int:
    """Print each of ``train``'s runs: its status, its stored rows and, unless done, its
    error's first line. Returns how many failed."""
    failed = 0
    every = store.read("train", statuses=("done", "diverged", "failed"))
    for spec in specs:
        run_id = study.run_id(spec)
        rows = every[every["run_id"] == run_id] if not every.empty else every
        status = store.status(run_id)
        print(f"run {run_id} (seed {spec.seed}): {status}" if len(specs) > 1
              else f"run {run_id}: {status}")
        if not rows.empty:
            shown = [c for c in _TRAIN_COLUMNS if c in rows.columns]
            print(rows[shown].to_string(index=False, na_rep=""))
        if status != "done":
            error = store.runs("train").set_index("run_id").loc[run_id, "error"]
            print(f"{status}: {str(error).splitlines()[0] if error else ''}")
        failed += status == "failed"
    return failed


def _explain(resolved, model: str, task: str, preset: str, seeds: tuple[int, ...]) -> None:
    """Print each effective option of the run ``train`` would make (``resolved``, a
    `settings.Resolved`), with its source."""
    from .settings import explain_text

    seed_text = ", ".join(map(str, seeds))
    print(f"train {model} on {task}, preset {preset}, seed(s) {seed_text}: each effective "
          "option, its value and where it came from (sources in increasing precedence: "
          "defaults, task preset, registration, study layer options, recipes, command line; "
          "width options fill what none of them set). Nothing is trained.")
    print(explain_text(resolved))


def _train_model(model: str | None, layer: str | None) -> str | None:
    """The layer of a ``train`` run: ``model=``, or ``network.layer=`` (its other spelling);
    both naming different layers is a `UsageError`."""
    if layer is None or model is None:
        return model if layer is None else layer
    same = layer == model
    if not same and (":" in layer or ":" in model):  # an import path and a name may agree
        from linrnn_bench import models

        try:
            same = models.resolve(layer) == models.resolve(model)
        except ValueError:
            same = False
    if not same:
        raise UsageError(
            f"network.layer={layer} and model={model} name two different layers for one run; "
            f"give the layer once, as model=<name> (network.layer is set from it)."
        )
    return model


def _layer_options(items: dict[str, str]) -> dict[str, str]:
    """The ``layer.<option>=value`` items of a ``train`` or ``study`` command, taken out of
    ``items``, as ``{option: value}`` (parsed later by each model's config class)."""
    keys = [k for k in items if k.startswith("layer.")]
    return {key.removeprefix("layer."): items.pop(key) for key in keys}


def _grid(study, config) -> list[Any]:
    from .runner import check_seeds

    try:
        specs = study.grid(config)
        check_seeds(specs)
        return specs
    except ValueError as e:
        raise UsageError(str(e)) from None


def _cmd_study(args) -> int:
    from .runner import run_study

    study = _study(args.name)
    items = _config.parse_overrides(args.overrides)
    _check_preset(args.preset)
    layer = _layer_options(items)
    config = study.config(args.preset, items)
    if layer:
        config = _with_layer_options(study, config, layer)
    _grid(study, config)  # a bad value in the grid is a usage error, before anything runs
    executor = _executor(args)
    store = _prepare(args.store)
    summary = run_study(study, config, store=store, fresh=args.fresh, executor=executor)
    _print_summary(summary)
    print(f"store: {args.store}")
    return _runs_failed(summary.counts.get("failed", 0), args.store)


def _with_layer_options(study, config, options: dict[str, str]):
    """``config`` of ``study`` with the command line's ``layer.<option>`` values, as the study
    declares (`Study.take_layer_options`: the accuracy study takes them as its last recipe,
    the stability study in its ``layer_options``). Another study refuses them: its layers'
    settings are its own config keys."""
    if study.take_layer_options is not None:
        return study.take_layer_options(config, options)
    raise UsageError(f"Study {study.name!r} takes no layer options (layer.{next(iter(options))}); "
                     "its layers' settings are its own config keys.")


def _cmd_figure(args) -> int:
    """``figure NAME``: ``report --only NAME`` (the artifact's files, byte-identical to the
    whole report's)."""
    args.only = list(args.names)
    return _cmd_report(args)


def _cmd_report(args) -> int:
    from . import studies
    from .report import (ReportError, ReportIncomplete, ReportPartlyReplaced, writers,
                         check_destination, check_only, render)
    from .runner import run_study

    items = _config.parse_overrides(getattr(args, "overrides", []))
    if items:
        raise UsageError(f"report takes no key=value settings (got "
                         f"{', '.join(f'{k}={v}' for k, v in items.items())}); the studies' "
                         "settings go to linrnn-bench study NAME key=value.")
    _report_run_options(args)
    try:
        # Before any study runs: a bad --out would otherwise be found after hours of runs.
        out = writers.check_out_dir(args.out)
        check_destination(args.store, out, only=args.only)
        if args.run:  # without --run, render refuses an unknown name before it writes
            check_only(args.only)
        writers.FigureWriters.check_workers(args.workers)
    except (ReportError, ValueError) as e:
        raise UsageError(str(e)) from None
    failed = 0
    if args.run:
        executor = _executor(args)
        store = _prepare(args.store)
        # One set of worker processes for every study (`ProcessExecutor.__enter__`).
        with executor if isinstance(executor, AbstractContextManager) else nullcontext():
            for name in studies.names():
                try:
                    study = _study(name)
                except UsageError as e:
                    print(f"note: skipping study {name!r}: {e}")
                    continue
                summary = run_study(study, study.config(args.preset), store=store,
                                    executor=executor)
                _print_summary(summary)
                failed += summary.counts.get("failed", 0)
    # Rendering reads the store and never creates or changes it; a damaged store stops here,
    # before anything is written (the report sections would otherwise each fail on their own).
    store = Store(args.store, create=False, readonly=True)
    store.check()
    try:
        render(store, out, workers=args.workers, only=tuple(args.only))
    except ReportIncomplete as e:
        for name, why in sorted(e.failures.items()):
            print(f"error: {name}: {why}", file=sys.stderr)
        print(f"error: report written to {out}, but incomplete: {e}", file=sys.stderr)
        return _runs_failed(failed, args.store) or REPORT_INCOMPLETE
    except (ReportError, ValueError) as e:  # e.g. --out holds files it did not write
        raise UsageError(str(e)) from None
    except ReportPartlyReplaced as e:  # it says how far it got; the next render completes it
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a full disk or a permission change while drawing or moving in
        print(f"error: {_report_write_failure(out, e)}", file=sys.stderr)
        return 1
    print(f"report written to {out}")
    return _runs_failed(failed, args.store)


def _report_write_failure(out: Path, error: OSError) -> str:
    """The line for a report that could not be written to ``out`` (`render` raises OSError
    only when no file of the previous report there was replaced)."""
    where = f" (writing {error.filename})" if error.filename else ""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk is full{where}: the report was not written to {out}, and the "
                "previous report there, if any, is unchanged. Free space and rerun the command.")
    return (f"the report could not be written to {out}: {error.strerror or error}{where}; the "
            "previous report there, if any, is unchanged.")


def _report_run_options(args) -> None:
    """Refuse --preset, --executor and --ray-address without --run (they choose how studies run,
    and a report alone runs none); fill in their defaults with it. An unknown preset is refused
    first, with the accepted ones."""
    if args.preset is not None:
        _check_preset(args.preset)
    if args.run:
        args.preset = args.preset or "cpu"
        args.executor = args.executor or "local"
        return
    given = [f"--{n.replace('_', '-')}" for n in ("preset", "executor", "ray_address")
             if getattr(args, n) is not None]
    if given:
        raise UsageError(
            f"{', '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} with --run, "
            "which runs the studies first (at that preset, on that executor); without --run "
            "the report renders the store as it is, each study at the preset whose runs the "
            "store holds most completely. Add --run, or leave them out."
        )


def _runs_failed(failed: int, store_path: Path) -> int:
    """Exit status 1 with one line when ``failed`` runs raised; 0 otherwise. A diverged run is
    a result (recorded and reported), not a failure."""
    if not failed:
        return 0
    print(f"error: {failed} run(s) failed; each is recorded with its error in {store_path} "
          "(its first line is above) and is retried when the command is run again.",
          file=sys.stderr)
    return RUNS_FAILED


# --------------------------------------------------------------------------------------------
# compare: a layer against the shipped reference (`harness.reference`)


def _compare_parser(sub) -> None:
    from .reference import DEFAULT_FOLDER

    p = sub.add_parser(
        "compare", epilog=EXIT_STATUS,
        help="train one layer at a shipped reference's preset and report it beside the "
             "reference's models, reusing their runs")
    p.add_argument("model", help="a registry name or an import path package.module:Layer")
    p.add_argument("--reference", type=Path, default=DEFAULT_FOLDER,
                   help=f"the reference folder (default {DEFAULT_FOLDER})")
    p.add_argument("--store", type=Path, default=None,
                   help="the store the reference is copied into and the layer's runs go to "
                        "(default results/against-<preset>.sqlite)")
    p.add_argument("--out", type=Path, default=None,
                   help="the report's folder (default reports/against-<preset>)")
    _executor_arguments(p)
    p.set_defaults(handler=_cmd_compare)


def _cmd_compare(args) -> int:
    """Check that this code makes the reference's runs, copy them into the store, train only
    the model's runs at the reference's preset, and render the report of all of them. A
    reference this code does not reproduce is refused (exit 2) before anything is trained."""
    from . import reference
    from .errors import ReferenceResultError
    from .runner import run_study

    try:
        ref = reference.open_reference(args.reference)
        store_path = args.store or Path("results") / f"against-{ref.preset}.sqlite"
        out = _compare_destination(ref, store_path, args)
        model = _compare_model(args.model)
        executor = _executor(args)
        with reference.unpacked(ref) as shipped:
            _check_reference(ref, shipped)
            names = reference.reference_studies(shipped)
            reference.install(shipped, store_path)
    except ReferenceResultError as e:
        raise UsageError(str(e)) from None
    store = _prepare(store_path)
    failed = 0
    with executor if isinstance(executor, AbstractContextManager) else nullcontext():
        for name, config, reason in reference.model_configs(model, ref.preset, names):
            if config is None:
                print(f"note: {args.model} is not in the {name} study: {reason}.")
                continue
            summary = run_study(_study(name), config, store=store, executor=executor)
            _print_summary(summary)
            failed += summary.counts.get("failed", 0)
    args.store, args.out, args.only, args.run = store_path, out, [], False
    args.preset = args.executor = args.ray_address = None
    return _cmd_report(args) or _runs_failed(failed, store_path)


def _compare_destination(ref, store_path: Path, args) -> Path:
    """The report folder of ``compare``, checked before anything runs: neither it nor the
    store may lie in the reference's folder, which the command never writes."""
    from .report import ReportError, writers, check_destination

    out = args.out or Path("reports") / f"against-{ref.preset}"
    folder = ref.folder.resolve()
    for flag, path in (("--out", out), ("--store", store_path)):
        if path.resolve() == folder or folder in path.resolve().parents:
            raise UsageError(f"{flag} {path} lies in the reference folder {ref.folder}, which "
                             "compare never writes; pass a path outside it.")
    try:
        check_destination(store_path, writers.check_out_dir(out))
        writers.FigureWriters.check_workers(args.workers)
    except (ReportError, ValueError) as e:
        raise UsageError(str(e)) from None
    return out


def _compare_model(model: str) -> str:
    """``model`` checked to resolve, after the studies are imported (their presets list the
    models registered then: an outside layer must not join them)."""
    from linrnn_bench import models

    from . import studies

    for name in studies.names():
        _study(name)
    try:
        models.resolve(model)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return model


def _check_reference(ref, shipped: Store) -> None:
    """Refuse a reference whose runs this code would not make again, naming each study and
    what changed, and how to make it again; otherwise say what is reused."""
    from . import reference

    mismatches = reference.check(shipped, ref.preset)
    if mismatches:
        for mismatch in mismatches:
            print(f"error: {mismatch.text(ref.preset)}", file=sys.stderr)
        raise UsageError(
            f"the reference {ref.folder} was made by code whose runs differ from this code's "
            f"at preset {ref.preset}, so its runs cannot be paired with new ones; nothing was "
            "trained. Make the reference again with this code (make reference: every model's "
            "runs, hours on two CPU cores, resumable), then compare again.")
    held = len(shipped.recorded())
    print(f"reference {ref.folder} (preset {ref.preset}): this code makes its {held} runs "
          "again, so they are reused.")
