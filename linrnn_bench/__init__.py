"""linrnn-bench: a benchmark and diagnostics harness that compares linear RNNs.

One import name for the project: `linrnn_bench.models` (the layers, their registry and the
shared engine), `linrnn_bench.tasks` (the task interface and every task) and
`linrnn_bench.harness` (training, the studies, the results store, the report and the command
line, ``linrnn-bench`` or ``python -m linrnn_bench``). Importing this package imports none of
them.
"""
