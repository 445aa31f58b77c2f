"""Where a `make report`'s time went, from the store it filled.

``python -m benchmarks.report_time [--store results/store.sqlite]`` prints one
line per study: its runs, the wall time from its first run's start to its last run's end, the
run seconds summed over runs (more than the wall time when worker processes ran runs side by
side), and the seconds JAX spent compiling in the runs that record it (the accuracy and
stability studies' training runs, ``compile_seconds``: XLA's backend compile, a load from the
persistent cache included), with their share of those runs' seconds.

On the store of a cold `make report` (empty store, empty ``.cache``) this is the cold
report's time and its compile share. The numbers are the store's: nothing is timed here.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from datetime import datetime
from pathlib import Path


def study_times(store: Path) -> list[dict[str, object]]:
    """One dict per study in ``store``: runs, wall_s, run_s, compiled_runs, compile_s,
    compile_share (None where no run records compilation)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        runs = db.execute(
            "SELECT run_id, study, provenance, started_at, finished_at FROM runs "
            "WHERE status = 'done' ORDER BY study, started_at"
        ).fetchall()
        compile_by_run: dict[str, float] = {}
        for run_id, data in db.execute("SELECT run_id, data FROM rows"):
            row = json.loads(data)
            if row.get("compile_seconds") is not None:
                compile_by_run[run_id] = compile_by_run.get(run_id, 0.0) + row["compile_seconds"]
    out: dict[str, dict[str, object]] = {}
    for run_id, study, provenance, started, finished in runs:
        entry = out.setdefault(study, {"study": study, "runs": 0, "first": started,
                                       "last": finished, "run_s": 0.0, "compiled_runs": 0,
                                       "compiled_run_s": 0.0, "compile_s": 0.0})
        seconds = float(json.loads(provenance).get("seconds") or 0.0)
        entry["runs"] = int(entry["runs"]) + 1
        entry["first"] = min(str(entry["first"]), started)
        entry["last"] = max(str(entry["last"]), finished)
        entry["run_s"] = float(entry["run_s"]) + seconds
        if run_id in compile_by_run:
            entry["compiled_runs"] = int(entry["compiled_runs"]) + 1
            entry["compiled_run_s"] = float(entry["compiled_run_s"]) + seconds
            entry["compile_s"] = float(entry["compile_s"]) + compile_by_run[run_id]
    rows = []
    for entry in sorted(out.values(), key=lambda e: str(e["first"])):
        wall = (datetime.fromisoformat(str(entry.pop("last")))
                - datetime.fromisoformat(str(entry.pop("first")))).total_seconds()
        compiled_run_s = float(entry.pop("compiled_run_s"))
        share = float(entry["compile_s"]) / compiled_run_s if compiled_run_s else None
        rows.append({**entry, "wall_s": wall, "compile_share": share})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="results/store.sqlite", type=Path)
    args = parser.parse_args(argv)
    if not args.store.exists():
        print(f"error: no store at {args.store}; run `make report` first.", file=sys.stderr)
        return 2
    rows = study_times(args.store)
    if not rows:
        print(f"{args.store} holds no finished run.")
        return 0
    print(f"{'study':<11} {'runs':>5} {'wall s':>8} {'run s':>8} {'compile s':>10} {'share':>6}")
    for r in rows:
        share = "" if r["compile_share"] is None else f"{r['compile_share']:.0%}"
        compile_s = "" if not r["compiled_runs"] else f"{r['compile_s']:.0f}"
        print(f"{r['study']:<11} {r['runs']:>5} {r['wall_s']:>8.0f} {r['run_s']:>8.0f} "
              f"{compile_s:>10} {share:>6}")
    total = sum(float(r["wall_s"]) for r in rows)
    print(f"{'all':<11} {sum(int(r['runs']) for r in rows):>5} {total:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
