"""The command line, ``python -m harness``: a thin layer over the registries and the runner.

    python -m harness list [models|tasks|studies|presets]
    python -m harness train model=lru task=digits [seed=0] [preset=cpu] [network.d_model=64 ...]
    python -m harness study NAME [--preset P] [key=value ...] [--fresh] [--store PATH]
                                 [--executor local|processes|ray] [--workers N]
                                 [--ray-address ADDR]
    python -m harness report [--run] [--preset P] [--executor E] [--workers N] [--store PATH]
                             [--out reports]
    python -m harness check-layer MODEL [--d-model H] [--d-state N] [--long-length L]

A MODEL is a registry name or an outside layer's import path ``package.module:Layer``.

Every ``key=value`` is validated by the config it lands in; an unknown key, a bad value or an
unknown name prints one line and exits with status 2. Results go to the store (default
``results/store.sqlite``); run checkpoints go to ``checkpoints/`` beside it, and compiled XLA
programs to ``.cache/jax`` (``LINRNN_JAX_CACHE``; empty to switch the cache off).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, NoReturn

from . import config as _config
from .errors import ConfigError, ExecutorError, StoreError
from .executors import EXECUTORS
from .store import DEFAULT_PATH, Store

USAGE_ERROR = 2
_PRESET_LINES = {
    "smoke": "seconds: tiny sizes, used by the tests",
    "cpu": "minutes on two CPU cores: the default of `make report`",
    "cpu-full": "hours on two CPU cores: five seeds, more steps and tasks, every task tuned",
    "gpu": "the papers' configurations, for an accelerator",
}
_TRAIN_KEYS = ("model", "task", "seed", "preset")
_TRAIN_COLUMNS = ("kind", "step", "lr", "train_loss", "val_loss", "val_accuracy", "best_step",
                  "test_loss", "test_accuracy", "params", "train_seconds")


class UsageError(Exception):
    """A mistake on the command line; printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see python -m {self.prog} --help)")


def _stop(signum: int, frame: Any) -> NoReturn:
    # SIGTERM (kill, a scheduler's time limit) stops a grid as Ctrl-C does: finished runs are
    # in the store, the runs in flight and their worker processes are ended.
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv``; returns the exit status (0 ok, 1 a run or write failed,
    2 a usage, configuration or store error, 130 interrupted)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if in_main_thread else None
    try:
        return _main(argv)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    parser = _build_parser()
    try:
        # key=value overrides may come before or after the options (argparse alone would stop
        # collecting them at the first option).
        args, extra = parser.parse_known_args(argv)
        unknown = [e for e in extra if e.startswith("-") or not hasattr(args, "overrides")]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if extra:
            args.overrides = [*args.overrides, *extra]
        return args.handler(args)
    except (UsageError, ConfigError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    except ExecutorError as e:  # e.g. a worker process died: what finished is recorded
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: finished runs are in the store; rerun the command to resume.",
              file=sys.stderr)
        return 130


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="harness", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="list models, tasks, studies or presets")
    p.add_argument("what", nargs="?", default="all",
                   choices=("all", "models", "tasks", "studies", "presets"))
    p.set_defaults(handler=_cmd_list)

    p = sub.add_parser("train", help="one training run from key=value overrides")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.add_argument("--store", type=Path, default=DEFAULT_PATH)
    p.add_argument("--fresh", action="store_true", help="rerun even if recorded")
    p.set_defaults(handler=_cmd_train)

    p = sub.add_parser("study", help="run a study's grid at a preset")
    p.add_argument("name")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--fresh", action="store_true", help="rerun finished runs too")
    _executor_arguments(p)
    p.add_argument("--store", type=Path, default=DEFAULT_PATH)
    p.set_defaults(handler=_cmd_study)

    p = sub.add_parser("report", help="render the report from the store (--run: run studies first)")
    p.add_argument("--run", action="store_true", help="run every registered study first")
    p.add_argument("--preset", default="cpu")
    _executor_arguments(p)
    p.add_argument("--store", type=Path, default=DEFAULT_PATH)
    p.add_argument("--out", type=Path, default=Path("reports"))
    p.set_defaults(handler=_cmd_report)

    _check_layer_parser(sub)
    return parser


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


def _executor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", default="local", choices=EXECUTORS,
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
    from .studies.accuracy import CHECKPOINT_ENV

    from .runner import enable_compilation_cache

    store = Store(store_path)
    if store.readonly:  # found now, not after the first run has been computed
        raise StoreError(
            f"The store {store_path} is read-only for this user, so no run could be recorded. "
            "Make it writable (chmod u+w) or pass another path with --store."
        )
    os.environ.setdefault(CHECKPOINT_ENV, str(store_path.parent / "checkpoints"))
    enable_compilation_cache()
    return store


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
    import models

    print("models:")
    for name in models.names():
        info = models.info(name)
        module = sys.modules[info.config_cls.__module__]
        origin = "" if info.origin == models.BUILTIN else f" [from {info.origin}]"
        print(f"  {name:<24} {_first_paragraph(module.__doc__)}{origin}")
    print("  (a layer of your own joins by import path, package.module:Layer, wherever a model "
          "is accepted: python -m harness check-layer package.module:Layer)")


def _list_tasks() -> None:
    import tasks

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
    from .studies.accuracy import STUDY, Recipe

    items = _config.parse_overrides(args.overrides)
    request = {k: items.pop(k) for k in _TRAIN_KEYS if k in items}
    preset = request.get("preset", "cpu")
    _check_preset(preset)
    seed = _config.parse_value(request.get("seed", "0"), int, "train.seed")
    # task.* and layer.* keys become a recipe for this one run (their text is parsed by the
    # task's and the layer's config classes once the model is known); the rest are config keys.
    extra = tuple((k, v) for k, v in items.items() if k.startswith(("task.", "layer.")))
    rest = {k: v for k, v in items.items() if not k.startswith(("task.", "layer."))}
    unknown = sorted(k for k in rest if k.partition(".")[0] not in ("network", "train"))
    if unknown:
        raise UsageError(
            f"Unknown key(s) {unknown} for train; accepted: {', '.join(_TRAIN_KEYS)}, "
            "network.<field>, train.<field>, task.<option>, layer.<option>."
        )
    base = STUDY.config(preset, rest)
    try:
        config = dataclasses.replace(
            base,
            models=(request.get("model", base.models[0]),),
            tasks=(request.get("task", base.tasks[0]),),
            seeds=(seed,),
            depths=(),
            tune_tasks=(),  # one run at the recipe's learning rates, not the tuning grid
            recipes=(*base.recipes, Recipe(overrides=extra, source="command line")),
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    study = dataclasses.replace(STUDY, name="train")
    specs = _grid(study, config)
    store = _prepare(args.store)
    summary = run_study(study, config, store=store, fresh=args.fresh)
    _print_summary(summary)
    run_id = study.run_id(specs[0])
    rows = store.read("train", statuses=("done", "diverged", "failed"))
    rows = rows[rows["run_id"] == run_id] if not rows.empty else rows
    status = store.status(run_id)
    print(f"run {run_id}: {status}")
    if not rows.empty:
        shown = [c for c in _TRAIN_COLUMNS if c in rows.columns]
        print(rows[shown].to_string(index=False, na_rep=""))
    if status != "done":
        error = store.runs("train").set_index("run_id").loc[run_id, "error"]
        print(f"{status}: {str(error).splitlines()[0] if error else ''}")
        return 1
    return 0


def _grid(study, config) -> list[Any]:
    try:
        return study.grid(config)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _cmd_study(args) -> int:
    from .runner import run_study

    study = _study(args.name)
    _check_preset(args.preset)
    config = study.config(args.preset, _config.parse_overrides(args.overrides))
    _grid(study, config)  # a bad value in the grid is a usage error, before anything runs
    executor = _executor(args)
    store = _prepare(args.store)
    summary = run_study(study, config, store=store, fresh=args.fresh, executor=executor)
    _print_summary(summary)
    print(f"store: {args.store}")
    return 0


def _cmd_report(args) -> int:
    from . import studies
    from .report import ReportError, _writers, check_destination, render
    from .runner import run_study

    try:
        # Before any study runs: a bad --out would otherwise be found after hours of runs.
        out = _writers.check_out_dir(args.out)
        check_destination(args.store, out)
        _writers.FigureWriters.check_workers(args.workers)
    except (ReportError, ValueError) as e:
        raise UsageError(str(e)) from None
    if args.run:
        _check_preset(args.preset)
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
    # Rendering reads the store and never creates or changes it; a damaged store stops here,
    # before anything is written (the report sections would otherwise each fail on their own).
    store = Store(args.store, create=False, readonly=True)
    store.check()
    try:
        render(store, out, workers=args.workers)
    except (ReportError, ValueError) as e:  # e.g. --out holds files it did not write
        raise UsageError(str(e)) from None
    except OSError as e:  # a full disk or a permission change while writing
        print(f"error: the report could not be written to {out}: {e.strerror or e}; the "
              "previous report there, if any, is unchanged.", file=sys.stderr)
        return 1
    print(f"report written to {out}")
    return 0
