"""``python -m linrnn_bench``: the command line (`linrnn_bench.harness.cli`), as ``linrnn-bench``."""

import sys

from linrnn_bench.harness.cli import main

if __name__ == "__main__":  # not when a spawned worker process imports this module
    sys.exit(main())
