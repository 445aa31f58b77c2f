"""Measuring programs and starting processes: the only code of the harness that reads a clock or
starts a process. Studies, ``harness plan`` and the benchmarks all measure through it.

    timing      compiling ahead of time (lowering and compile timed apart, never a cache load),
                timing k calls to `jax.block_until_ready`, first calls, a wall-clock stopwatch
    roofline    the machine's measured peaks, analytic FLOP and byte counts, the lower bound,
                XLA's cost analysis and how the process runs (allocator, flags, device)
    memory      XLA's compiled-memory analysis, the peak bytes of one call, the linear fit of
                bytes against sequence length
    processes   every process the harness starts: a command run to its end, a function called
                in a fresh interpreter, worker pools
    lifetime    the guarantee that no process outlives the driver that started it

Import the module by its role (``from harness.measure import timing``): this package imports
none of them itself, so that the command line, which imports `processes` and `timing`, starts
without loading JAX.
"""
