"""``python -m linrnn_bench.harness``: the same as ``python -m linrnn_bench``."""

if __name__ == "__main__":  # not when a spawned worker process imports this module
    from linrnn_bench.__main__ import console

    console()
