"""The figure review's automated checks (`harness.report._review`, docs/figures.md): each one
on a figure made with that defect, which it must name, and on the figures of a report.

Every figure of every section is reviewed where its study's tests build it from a small store
(`helpers.assert_printable`, which runs `_review.problems`: tests/test_evidence.py,
test_stability.py, test_stability_sweep.py, test_theory.py, test_perf_studies.py); here the
accuracy section's figures from the synthetic store of tests/test_report.py.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from linrnn_bench.harness.report import Figure, _review, style  # noqa: E402
from linrnn_bench.harness.studies.accuracy import report as accuracy  # noqa: E402
from linrnn_bench.harness.store import Store  # noqa: E402
from helpers import assert_printable, record_synthetic_accuracy  # noqa: E402


def _axes(n: int = 1, **kwargs):
    style.apply_style()
    fig, axes = style.panels(n, 1.8, **kwargs)
    return fig, axes.flat[:n] if n > 1 else axes[0, 0]


def _curves(ax, steps=(100, 200, 300), series=2) -> None:
    for k in range(series):
        ax.plot(steps, [80.0 + k + s / 100 for s in range(len(steps))], marker="o",
                color=style.PALETTE[k], label=f"model {k}")


# --------------------------------------------------------------------------------------------
# Figures with one defect each: (name, draw, a phrase the review must say)


def _code_names():
    fig, ax = _axes()
    _curves(ax)
    ax.set_ylabel("||h|| / ||h|| at init")
    ax.set_title("RotRNN, xi off")
    ax.set_xlabel("d_z")
    ax.legend(["max |lambda|", "min"], loc="lower right")
    return fig


def _axis_set_by_hand():
    fig, ax = _axes()
    _curves(ax)
    ax.set_ylim(0, 100)  # data at 80-83 %
    return fig


def _axis_set_by_a_far_baseline():
    fig, ax = _axes()
    _curves(ax)
    ax.axhline(8.0, color="black", linestyle="--")  # a trivial baseline far below the data
    return fig


def _ticks_between_evaluations():
    fig, ax = _axes()
    _curves(ax)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))  # 120, 180, 240, 300
    return fig


def _ticks_between_lengths():
    fig, ax = _axes()
    for k in range(2):
        ax.plot([1024, 4096, 16384], [1e5 * (k + 1), 2e5, 3e5], marker="o",
                color=style.PALETTE[k])
    ax.set_xscale("log", base=2)  # every power of two labelled: 2048 and 8192 too
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_title("forward")
    return fig


def _mixed_tick_formats():
    fig, ax = _axes()
    ax.plot([1, 2, 3], [4e5, 1e6, 2.5e6], marker="o")
    ax.set_yscale("log")
    ax.set_yticks([5e5, 1e6, 2e6])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 500000 beside 1e+06
    return fig


def _outlier_sets_the_shared_axis():
    fig, axes = _axes(4, sharey=True)
    for k, ax in enumerate(axes):
        top = 1e4 if k == 3 else 3.0  # one unstable model's norm runs away
        ax.plot([0, 100, 200], [1.0, 2.0, top], marker="o")
        ax.set_yscale("log")
        ax.set_title(f"model {k}")
    return fig


def _overlapping_texts():
    fig, ax = _axes()
    _curves(ax)
    ax.set_xticks([100, 200, 300])
    ax.set_title("a title")
    ax.text(0.5, 1.02, "a note in the title's place", transform=ax.transAxes, ha="center")
    return fig


DEFECTS = [
    ("code-name-norm", _code_names, "the y label of 'RotRNN, xi off' '||h|| / ||h|| at init' "
                                    "writes || as code"),
    ("code-name-xi", _code_names, "the title of 'RotRNN, xi off' 'RotRNN, xi off' writes xi"),
    ("code-name-identifier", _code_names, "'d_z' writes a snake_case identifier as code"),
    ("code-name-lambda", _code_names, "the legend entry 'max |lambda|' writes lambda as code"),
    ("ticks-beyond-data", _axis_set_by_hand, "the y tick '20' of #1 lies beyond the data"),
    ("far-baseline", _axis_set_by_a_far_baseline, "lies beyond the data"),
    ("ticks-between-evaluations", _ticks_between_evaluations,
     "the x tick '120' of #1 is where no point is (the points are at 100, 200, 300)"),
    ("ticks-between-lengths", _ticks_between_lengths,
     "the x tick '2048' of 'forward' is where no point is (the points are at 1024, 4096, "
     "16384)"),
    ("mixed-tick-formats", _mixed_tick_formats,
     "the y ticks of #1 mix formats: '1e+06' beside '500000'"),
    ("outlier-sets-shared-axis", _outlier_sets_the_shared_axis,
     "the panel 'model 3' sets the y axis it shares with 3 others"),
    ("overlapping-texts", _overlapping_texts,
     "the title of 'a title' 'a title' overlaps the annotation of 'a title' \"a note in the "
     "title's place\""),
]


@pytest.mark.parametrize("name,draw,said", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_each_defect_is_named(name, draw, said):
    fig = draw()
    found = _review.problems(fig)
    plt.close(fig)
    assert any(said in p for p in found), (name, found)


def test_a_figure_a_paper_can_print_passes():
    """The same data drawn as the checklist asks: mathtext, ticks at the evaluations, the axis
    from the data, the baseline named rather than drawn far away, one tick format."""
    fig, ax = _axes()
    _curves(ax)
    ax.set_xticks([100, 200, 300])
    ax.set_ylabel(r"$\|h\|$ / $\|h\|$ at init")
    ax.set_title(r"RotRNN, $\xi$ off; max $|\lambda|$, $d_z$")
    ax.axhline(81.0, color="black", linestyle=":")  # a reference line within the data
    assert _review.problems(fig) == []
    plt.close(fig)


def test_an_outlier_on_a_scale_of_its_own_passes():
    """`style.share_y` gives the panels one range but the outlier's, which keeps its own."""
    fig, axes = _axes(4)
    tops = {}
    for k, ax in enumerate(axes):
        top = 1e4 if k == 3 else 3.0
        ax.plot([0, 100, 200], [1.0, 2.0, top], marker="o")
        ax.set_yscale("log")
        ax.set_xticks([0, 100, 200])
        ax.set_title(f"model {k}")
        tops[ax] = (0.0, float(np.log10(top)))
    own = style.outlier_panels(tops)
    assert own == [axes[3]]
    style.share_y(list(axes), own=own)
    assert axes[0].get_ylim() == axes[2].get_ylim() != axes[3].get_ylim()
    assert _review.problems(fig) == []
    plt.close(fig)


def test_dodged_marks_keep_their_position_in_the_data():
    """`style.dodge` sets marks apart on the page, not in the data: ticks at the design values
    still read as where the points are."""
    fig, ax = _axes()
    lines = [ax.plot([1, 2, 4], [k, k + 1, k + 2], marker="o", color=style.PALETTE[k])[0]
             for k in range(2)]
    style.dodge([lines[0]], -3.0)
    style.dodge([lines[1]], 3.0)
    ax.set_xticks([1, 2, 4])
    fig.canvas.draw()
    drawn = [line.get_transform().transform(line.get_xydata())[0, 0] for line in lines]
    assert drawn[1] - drawn[0] == pytest.approx(6.0 / 72.0 * fig.dpi)
    assert _review.ticks_without_data(ax, "x") == []
    np.testing.assert_array_equal(lines[0].get_xdata(), [1, 2, 4])
    plt.close(fig)


def test_the_accuracy_figures_of_a_small_store_pass(tmp_path: Path):
    """The accuracy section's figures from the synthetic store pass the whole review."""
    store = Store(tmp_path / "store.sqlite")
    record_synthetic_accuracy(store)
    artifacts = accuracy.build(store)
    assert {a.name for a in artifacts if isinstance(a, Figure)} >= {
        "accuracy_by_task", "accuracy_curves"}
    assert_printable(artifacts)


def test_tick_labels_over_many_decades_are_powers_of_ten():
    # An unstable layer's norm can span 20 decades: no "1e+07G" beside "0.0001".
    from linrnn_bench.harness.report import style

    assert style.plain_number(1e16) == "$10^{16}$" and style.plain_number(2e9) == "2G"
    assert "e+" not in style.plain_number(3.3e13)
