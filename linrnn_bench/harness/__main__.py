"""``linrnn-bench``: see `harness.cli`."""

from .cli import console

if __name__ == "__main__":  # not when a spawned worker process imports this module
    console()
