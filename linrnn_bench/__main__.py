"""``python -m linrnn_bench`` and the ``linrnn-bench`` command (`console`): the command line,
`linrnn_bench.harness.cli`."""


def console() -> None:
    """The program's entry: the process settings first, before numpy or jax load (the command
    line imports them; `harness.process_settings`), then `harness.cli.console`."""
    from linrnn_bench.harness import process_settings

    process_settings.apply()
    from linrnn_bench.harness.cli import console as command_line

    command_line()


if __name__ == "__main__":  # not when a spawned worker process imports this module
    console()
