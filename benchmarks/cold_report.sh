#!/usr/bin/env bash
# The cold `make report` of a fresh clone, timed by stage, as docs/performance.md reports it:
#   benchmarks/cold_report.sh [REPO] [DIR]
# clones REPO (default: this checkout) into DIR (default: a new temporary folder), runs
# `make env`, `make report` and a second `make report`, and prints each stage's seconds and
# where the report's time went (`benchmarks.report_time`). Run it on idle cores: every number
# is a wall time.
set -u
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
dir=${2:-$(mktemp -d -t cold-report.XXXXXX)}
rm -rf "$dir" && git clone -q "$repo" "$dir" && cd "$dir" || exit 1
s=$(date +%s)
make env > env.log 2>&1 || { echo "make env failed: $dir/env.log"; exit 1; }
e=$(date +%s)
echo "set-up $((e - s)) s"
make report > report.log 2>&1
rc=$?
r=$(date +%s)
echo "report $((r - e)) s (exit status $rc)"
echo "cold total $((r - s)) s"
make report > report2.log 2>&1
r2=$(date +%s)
echo "cached $((r2 - r)) s"
.venv/bin/python -m benchmarks.report_time --store results/store.sqlite
echo "clone, logs and reports: $dir"
