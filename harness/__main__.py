"""``python -m harness`` from a clone: the command moved; say in one line what to type."""

import sys

sys.exit("the harness is now `linrnn-bench` (or `python -m linrnn_bench`): e.g. "
         f"linrnn-bench {' '.join(sys.argv[1:]) or 'list'}")
