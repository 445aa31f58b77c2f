"""``python -m linrnn_bench`` and the ``linrnn-bench`` command (`console`): the command line,
`linrnn_bench.harness.cli`."""


def console() -> None:
    """The program's entry: the stop signals' handlers and the process settings first, before
    numpy or jax load, then `harness.cli.console`.

    The handlers come first because importing the command line takes a good part of a second
    (numpy, pandas): a SIGTERM or Ctrl-C in that time would otherwise kill the process with
    the default action instead of status 130. A stop then is raised once the import is done
    (`harness.measure.lifetime.stop_signals`); nothing has run, so nothing is lost. The
    process settings come before numpy or jax load (`harness.process_settings`); the
    lifetime module loads neither.
    """
    import sys

    from linrnn_bench.harness import process_settings
    from linrnn_bench.harness.measure import lifetime

    try:
        with lifetime.stop_signals():
            process_settings.apply()
            from linrnn_bench.harness.cli import console as command_line

            command_line()
    except KeyboardInterrupt:  # a stop before the command line had started its command
        print("interrupted: the command had not started; nothing ran.", file=sys.stderr)
        lifetime.exit_interrupted()


if __name__ == "__main__":  # not when a spawned worker process imports this module
    console()
