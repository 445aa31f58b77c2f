"""``python -m linrnn_bench``: the command line (`linrnn_bench.harness.cli`), as ``linrnn-bench``."""

from linrnn_bench.harness.cli import console

if __name__ == "__main__":  # not when a spawned worker process imports this module
    console()
