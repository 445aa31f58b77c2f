"""Training and evaluation: the papers' recipe, checkpoints, divergence, model selection.

The recipe (LRU, S5 and S4D papers): AdamW with a linear warm-up then a cosine decay to zero;
the *recurrent* parameters (each layer's `recurrent_mask()`, never parameter names) get their own
learning rate and no weight decay:

    regular:    AdamW(lr * s(t), weight_decay)          encoder, norms, GLU, head, C, D, ...
    recurrent:  Adam(recurrent_lr * s(t))               eigenvalues, angles, timescales, ...
    s(t) = t / T_w for t < T_w, then (1 + cos(pi (t - T_w) / (T - T_w))) / 2

with optional clipping of the global gradient norm before both. Batches are drawn without
replacement from a permutation of the training split that depends only on (seed, epoch), so a
run resumed from a checkpoint sees exactly the batches an uninterrupted one would; the last
incomplete batch of an epoch is dropped (one batch size). Each batch is cut to the shortest of
a few bucket lengths that holds its longest example: only steps that are padding in every
example go, and since padding is exact (`models.network`) the loss is unchanged up to float
round-off, while a task compiles at most four shapes (one for a task shorter than 128 tokens,
where a shape's compile costs more than its shorter steps save: `BUCKET_SPACING`).

Every number of the recipe (learning rates, weight decay, warm-up, steps, clipping threshold)
is data in the optimiser's state, never a constant of the compiled step, so one compilation per
(shape, structure) serves every seed and learning rate of a grid, in a process and, through the
persistent compilation cache, across processes.

Evaluation runs in inference mode (BatchNorm's running statistics, no dropout) over every example
of a split exactly once. Model selection is on validation (accuracy, or loss for regression);
the test split is evaluated once, for the selected checkpoint.

A non-finite loss or gradient stops the run at once: `harness.studies.Diverged` carries the rows
measured so far and the step. The finiteness flag is the only per-step host synchronisation, and
it is read one step late so that the next step is already queued.

The package, by role:

    recipe.py       `TrainConfig`: the recipe's numbers and its schedule
    optimiser.py    the two-group optimiser (optax), its state and its update
    batches.py      `Batch`, `BatchSampler` and the length buckets a batch is cut to
    step.py         `build_network`, the loss sums of a batch, the one training step
                    (`Stepper`; `GroupStepper` for a seed group)
    evaluate.py     evaluation over a split and model selection
    checkpoints.py  writing, reading and resuming checkpoints
    rows.py         the rows a run records and the `TrainResult` it returns
    loop.py         `train`, and the loop's parts a seed group shares
    group.py        `train_group`: k seeds as one compiled program
"""

from .batches import (BUCKET_SPACING, Batch, BatchSampler, bucket_lengths, split_length,
                      to_batch, trimmed_length)
from .checkpoints import _CHECKPOINT_FORMAT, _identity, _resume, load_checkpoint, save_checkpoint
from .checkpoints import CHECKPOINT_ENV as CHECKPOINT_ENV
from .checkpoints import checkpoint_dir as checkpoint_dir
from .evaluate import _eval_sums, evaluate, evaluate_group
from .group import stack, train_group, unstack
from .loop import _COMPILE_EVENT, _compile_listener, train
from .optimiser import (Optimiser, OptimiserState, hyperparameters, init_optimiser,
                        make_optimiser, optimiser_update, parameter_groups, scheduled)
from .recipe import TrainConfig
from .rows import OnEval, TrainResult
from .step import (GroupStepper, Stepper, _flat_group_step, _flat_step, _forward, batch_sums,
                   build_network)

__all__ = [
    "BUCKET_SPACING", "Batch", "BatchSampler", "GroupStepper", "OnEval", "Optimiser",
    "OptimiserState", "Stepper", "TrainConfig", "TrainResult", "batch_sums", "bucket_lengths",
    "build_network", "evaluate", "evaluate_group", "hyperparameters", "init_optimiser",
    "load_checkpoint", "make_optimiser", "optimiser_update", "parameter_groups",
    "save_checkpoint", "scheduled", "split_length", "stack", "to_batch", "train",
    "train_group", "trimmed_length", "unstack",
]
