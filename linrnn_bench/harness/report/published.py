"""Published numbers from the literature, each with its source (paper, table, venue, arXiv id).

The papers, listed in full in docs/sources.md:

- LRU: Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu, De, "Resurrecting Recurrent Neural
  Networks for Long Sequences", ICML 2023, arXiv:2303.06349. Table 3 (LRA test accuracy) and
  Table 4 (training steps per second on an A100).
- S4: Gu, Goel, Re, "Efficiently Modeling Long Sequences with Structured State Spaces", ICLR
  2022, arXiv:2111.00396; its LRA row as the LRU paper's Table 3 quotes it.
- S4D: Gu, Gupta, Goel, Re, "On the Parameterization and Initialization of Diagonal State Space
  Models", NeurIPS 2022, arXiv:2206.11893; S4D-LegS as the LRU paper quotes it, S4D-Lin from a
  secondary copy of the S4D paper's LRA table.
- S5: Smith, Warrington, Linderman, "Simplified State Space Layers for Sequence Modeling", ICLR
  2023, arXiv:2208.04933; its LRA results.
- RotRNN: Biegun, Dolga, Cunningham, Barber, "RotRNN: Modelling Long Sequences with
  Rotations", arXiv:2407.07239; its Speech Commands result (its LRA numbers were not confirmed).
- The Long Range Arena: Tay et al., ICLR 2021, arXiv:2011.04006.

These are *not* our results. They live here, apart from the store, so that no published value can
reach one of our tables: the report shows them in their own section, labelled "published", and
the accuracy section sets them beside ours only in columns named as published.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from .artifacts import Artifact, Table

# LRA tasks in the order the papers' tables list them.
LRA_TASKS: tuple[str, ...] = ("ListOps", "Text", "Retrieval", "Image", "Pathfinder", "Path-X")

FAILS = "fails"  # the model did not beat chance (S4D-Lin on Path-X)
UNKNOWN = "unknown"  # no source could confirm a number


@dataclasses.dataclass(frozen=True)
class PublishedRow:
    """One model's published LRA test accuracies (%), by task, and where they were published.

    ``scores`` holds, per task of `LRA_TASKS`, the number as the source prints it (text, so that
    its published precision is kept: "60.2" is not "60.20"), or `FAILS` or `UNKNOWN`.
    """

    model: str
    scores: tuple[str, ...]
    source: str
    note: str = ""

    def __post_init__(self):
        if len(self.scores) != len(LRA_TASKS):
            raise ValueError(f"{self.model}: need one score per task of {LRA_TASKS}.")
        for score in self.scores:
            if score in (FAILS, UNKNOWN):
                continue
            try:
                float(score)
            except ValueError:
                raise ValueError(
                    f"{self.model}: score {score!r} is neither a number nor {FAILS!r} or "
                    f"{UNKNOWN!r}."
                ) from None


# LRA test accuracy (%): LRU paper Table 3, which quotes the S4 and S4D-LegS rows; S4D-Lin from
# a secondary copy of the S4D paper's table; S5 from its paper.
LRA_ACCURACY: tuple[PublishedRow, ...] = (
    PublishedRow("S4 (LegS)", ("59.60", "86.82", "90.90", "88.65", "94.20", "96.35"),
                 "S4 paper (Gu et al., ICLR 2022, arXiv:2111.00396), as quoted in the LRU "
                 "paper's Table 3"),
    PublishedRow("S4D-LegS", ("60.47", "86.18", "89.46", "88.19", "93.06", "91.95"),
                 "S4D paper (Gu et al., NeurIPS 2022, arXiv:2206.11893), as quoted in the LRU "
                 "paper's Table 3"),
    PublishedRow("S4D-Lin", ("60.52", "86.97", "90.96", "87.93", "93.96", FAILS),
                 "S4D paper (Gu et al., NeurIPS 2022, arXiv:2206.11893), from a secondary "
                 "copy of its LRA table"),
    PublishedRow("S5", ("62.15", "89.31", "91.40", "88.00", "95.33", "98.58"),
                 "S5 paper (Smith et al., ICLR 2023, arXiv:2208.04933), LRA results"),
    PublishedRow("LRU", ("60.2", "89.4", "89.9", "89.0", "95.1", "94.2"),
                 "LRU paper (Orvieto et al., ICML 2023, arXiv:2303.06349), Table 3",
                 note="Image is colour sCIFAR"),
    PublishedRow("RotRNN", (UNKNOWN,) * 6,
                 "RotRNN paper (Biegun et al., arXiv 2407.07239): LRA numbers not confirmed"),
)

# LRU paper, Table 4: training steps per second on one A100 (task order as listed there).
LRA_SPEED_TASKS: tuple[str, ...] = ("ListOps", "Text", "Retrieval", "Pathfinder", "Path-X")
LRA_SPEED: dict[str, tuple[float, ...]] = {
    "LRU": (2.1, 14.7, 5.7, 15.5, 2.4),
    "S4D": (2.2, 10.6, 3.0, 24.5, 2.6),
    "S5": (2.2, 14.4, 5.7, 15.6, 2.3),
}
LRA_SPEED_SOURCE = ("LRU paper (Orvieto et al., ICML 2023, arXiv:2303.06349), Table 4, training "
                    "steps/s on an A100")

# Speech Commands, 35 classes (raw 16 kHz audio): the RotRNN paper's one non-LRA result, in
# which its reproduction of the LRU scores the same at a similar parameter count. The S4D and S5
# papers report SC35 too, but those numbers were not checked against the papers for this
# project, so they are not shown.
SPEECH_ACCURACY: tuple[tuple[str, str, str], ...] = (
    ("RotRNN", "95.2", "RotRNN paper (Biegun et al., arXiv 2407.07239), Speech Commands 35-way"),
    ("LRU (reproduced by the RotRNN authors)", "95.2",
     "RotRNN paper (Biegun et al., arXiv 2407.07239), the authors' LRU at a similar "
     "parameter count"),
)

# Which of our registered models each published row corresponds to (for the side-by-side table).
OUR_MODEL_OF: dict[str, str] = {"S4D-Lin": "s4d", "S5": "s5", "LRU": "lru", "RotRNN": "rotrnn"}

# Our tasks that are an LRA task at some scale (`tasks.names()`), and the LRA column they match:
# the LRA releases read from disk, and the generated tasks built by the LRA generator's rules.
LRA_TASK_OF: dict[str, str] = {
    "lra_listops": "ListOps",
    "lra_text": "Text",
    "lra_retrieval": "Retrieval",
    "lra_image": "Image",
    "lra_pathfinder": "Pathfinder",
    "lra_pathx": "Path-X",
    "listops": "ListOps",
    "pathfinder": "Pathfinder",
    "pathx": "Path-X",
}

TITLE = "Published numbers (not ours)"
INTRO = (
    "Numbers copied from the papers, each with its source: they were measured "
    "by the papers' authors at full scale (the LRA data sets, 6-8 blocks of width 128-512, "
    "tens to hundreds of thousands of training steps on accelerators). They are shown for "
    "orientation only; none of them was measured by this project, and none is mixed into our "
    "tables. The papers, with venues and arXiv ids, are listed in docs/sources.md."
)


def accuracy_frame() -> pd.DataFrame:
    """The published LRA accuracies: one row per model, one column per task (object dtype)."""
    frame = pd.DataFrame(
        [list(row.scores) for row in LRA_ACCURACY],
        index=pd.Index([row.model for row in LRA_ACCURACY], name="Model (published)"),
        columns=list(LRA_TASKS),
        dtype=object,
    )
    return frame


def section() -> list[Artifact]:
    """The published LRA accuracy, Speech Commands accuracy and LRA speed tables, labelled as
    published."""
    accuracy = accuracy_frame().assign(Source=[row.source for row in LRA_ACCURACY])
    notes = "; ".join(f"{row.model}: {row.note}" for row in LRA_ACCURACY if row.note)
    speed = pd.DataFrame(
        LRA_SPEED, index=pd.Index(list(LRA_SPEED_TASKS), name="Task")
    ).T.rename_axis("Model (published)")
    return [
        Table(
            name="published_lra_accuracy",
            title="Published LRA test accuracy (%)",
            caption=(
                "PUBLISHED values, not measured by this project: test accuracy (%) on the Long "
                "Range Arena at the papers' full scale, with the source of each row. "
                f"'{FAILS}': no better than chance; '{UNKNOWN}': no source confirms a number. "
                f"Notes: {notes}. Best published value per task in bold."
            ),
            frame=accuracy,
            best={task: "max" for task in LRA_TASKS},
            digits=2,
        ),
        Table(
            name="published_speech_commands",
            title="Published Speech Commands test accuracy (%)",
            caption=(
                "PUBLISHED values, not measured by this project: test accuracy (%) on Speech "
                "Commands with 35 classes (raw audio, length 16000), with the source of each "
                "row. The RotRNN paper reports its RotRNN and its own reproduction of the LRU "
                "at the same accuracy with similar parameter counts."
            ),
            frame=pd.DataFrame(
                {"Speech Commands 35 (%)": [a for _, a, _ in SPEECH_ACCURACY],
                 "Source": [src for _, _, src in SPEECH_ACCURACY]},
                index=pd.Index([m for m, _, _ in SPEECH_ACCURACY], name="Model (published)"),
                dtype=object,
            ),
            digits=1,
        ),
        Table(
            name="published_lra_speed",
            title="Published LRA training speed (steps/s, A100)",
            caption=(
                f"PUBLISHED values, not measured by this project: {LRA_SPEED_SOURCE}, at the "
                "papers' full model sizes and batch sizes. Fastest per task in bold."
            ),
            frame=speed,
            best={task: "max" for task in LRA_SPEED_TASKS},
            digits=1,
        ),
    ]
