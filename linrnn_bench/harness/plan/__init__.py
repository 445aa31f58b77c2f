"""A preset priced and rehearsed before an accelerator hour is spent.

``linrnn-bench plan --preset P [--device NAME]`` lists, per study, the runs the preset's
grid makes (per model and task, and what the store already holds) and every *distinct program*
they compile: a layer's batched call, a network's training step, an evaluation pass, a probe.
For each program it gives

- its FLOPs and bytes: our analytic count (`harness.measure.roofline.layer_counts`, and for a network's
  training step `harness.studies.throughput.step.step_counts`) and XLA's cost analysis beside it;
- its compiled memory: XLA's memory analysis of the program compiled at the preset's real
  shapes from `jax.ShapeDtypeStruct` inputs (nothing of that size is allocated), as the memory
  study does (`harness.measure.memory.compiled_memory`); a program whose working set exceeds the
  device's usable memory is flagged, with the largest batch that would fit;
- the roofline bound of one call, max(FLOPs / peak FLOP/s, bytes / bandwidth), on this machine
  (peaks measured by `harness.measure.roofline.measure_peaks`, as the throughput study measures them) or
  on an accelerator from `DEVICES` (published peaks) or ``--peak-flops/--bandwidth``.

A run's predicted time is the sum over its programs of calls x bound. **The bound is a lower
bound on time, never an estimate of it**: it assumes every FLOP at the matmul peak and every
byte at the memory bandwidth, and leaves out compiles, host work, process starts and a
sequential scan's dependent steps. It says which runs cannot be cheap, not how long they take.

``linrnn-bench rehearse --preset P`` builds, compiles and runs every distinct program of
every study for two calls on the local backend, at the preset's real shapes (sequence length,
width, depth, state size); only the batch is reduced, and then said, where this machine's
memory cannot hold the program. It generates every task of the preset (or counts a loader task
as not generated: it reads a release from disk, checked on small files by the loader tests),
timing each. A failure is recorded with its cause and the rehearsal goes on; the failures are
listed at the end.

The accelerator's code path. The engine resolves ``algorithm="auto"`` by backend
(`models._engine.resolve_algorithm`): the CPU kernels (``native``, ``fused``) on a CPU, the
parallel scan (MIMO systems) and the FFT convolution (banks) elsewhere. Every program here is
traced inside `models._engine.assume_backend` (``"gpu"`` by default), so the programs compiled
and rehearsed are the ones an accelerator would run; the algorithm column says which. No kernel
of this project exists only for an accelerator (the only hand-written kernels, `models._native`,
are CPU-only), so nothing is left out of the rehearsal on that account; what a CPU cannot

The package, by role (each module imports only those above it in this list):

    targets     the accelerators' published peaks, this machine's measured ones, the memory a
                program may use, the accelerator's code path (`accelerator_path`)
    facts       what the plan needs of a task: its info, its splits' sizes, the preset's tasks
    builders    the distinct programs (a layer's call, a training step, an evaluation pass,
                the network's forward pass, the stability probe) and a run's programs
    catalogue   every study's runs and programs at a preset (its `Study.planner`, in
                `harness/studies/<name>/plan.py`), and what the store holds of them
    pricing     a program's counts, XLA's costs and memory, its bound, whether it fits
    text        the priced plan as text (`plan_text`)
    rehearsal   the programs compiled and run here, the tasks generated (`rehearse`)
"""

from __future__ import annotations

from .builders import (Built, Program, RunPlan, eval_program, layer_program, network_batch,
                       network_forward_program, probe_programs, train_step_program)
from .facts import TaskFacts, is_loader, preset_tasks, reduced_options, task_facts
from .catalogue import StudyPlan, catalogue
from .pricing import Priced, compile_abstract, price
from .rehearsal import Rehearsed, rehearsal_text, rehearse, rehearse_program, rehearse_task
from .targets import (DEVICE_MEMORY_FRACTION, DEVICES, LOCAL_MEMORY_FRACTION, Device, Target,
                      accelerator_path, available_memory, device_target, local_target)
from .text import plan_text

__all__ = [
    "DEVICES", "DEVICE_MEMORY_FRACTION", "LOCAL_MEMORY_FRACTION", "Built", "Device",
    "Priced", "Program", "Rehearsed", "RunPlan", "StudyPlan", "Target", "TaskFacts",
    "accelerator_path", "available_memory", "catalogue", "compile_abstract", "device_target",
    "eval_program", "is_loader", "layer_program", "local_target", "network_batch",
    "network_forward_program", "plan_text", "preset_tasks", "price", "probe_programs",
    "reduced_options", "rehearsal_text", "rehearse", "rehearse_program", "rehearse_task",
    "task_facts", "train_step_program",
]
