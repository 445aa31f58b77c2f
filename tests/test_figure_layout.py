"""The layout check (`harness.report._layout`) on figures whose defects are known."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from linrnn_bench.harness.report import _layout, style  # noqa: E402


def _figure():
    style.apply_style()
    return plt.subplots(figsize=style.figsize())


def test_a_clean_figure_passes():
    fig, ax = _figure()
    x = np.linspace(0, 1, 50)
    ax.plot(x, x**2, label="quadratic")
    ax.axhline(0.5, color="grey", linestyle=":")  # a reference line may pass under a legend
    ax.set(xlabel="step", ylabel="value")
    fig.legend(loc="outside upper center", ncols=1)
    assert _layout.problems(fig) == []
    plt.close(fig)


def test_a_legend_over_data_colliding_ticks_and_small_text_fail():
    fig, ax = _figure()
    x = np.linspace(0, 1, 50)
    ax.plot(x, np.full_like(x, 0.5), label="flat line through the middle")
    ax.fill_between(x, 0.0, 1.0, alpha=0.2)
    ax.legend(loc="center")
    ax.set_xticks(np.linspace(0, 1, 40))
    ax.set_xticklabels([f"{v:.4f}" for v in np.linspace(0, 1, 40)])
    ax.text(0.5, 0.9, "tiny", fontsize=5)
    ax.text(1.5, 0.5, "out of the picture", transform=ax.transAxes)
    found = "\n".join(_layout.problems(fig))
    assert "a legend covers the line 'flat line through the middle'" in found
    assert "the x tick label of #1 '0.0000' overlaps the x tick label of #1 '0.0256'" in found
    assert "'tiny' is 5 pt, below 7 pt" in found
    assert "'out of the picture' reaches outside the canvas" in found
    plt.close(fig)


def test_markers_and_bands_under_a_legend_are_found():
    fig, ax = _figure()
    ax.scatter([0.5], [0.5], label="one point")
    ax.legend(loc="center")
    assert any("covers the PathCollection" in p for p in _layout.problems(fig))
    plt.close(fig)
    fig, ax = _figure()
    ax.fill_between([0, 1], [0.2, 0.2], [0.8, 0.8], label="band")
    ax.plot([0, 0.1], [0, 1.0])
    ax.legend(loc="center")
    assert any("covers the FillBetweenPolyCollection" in p or "covers the PolyCollection" in p
               for p in _layout.problems(fig))
    plt.close(fig)


def test_panels_fill_rows_and_hide_the_rest():
    fig, axes = style.panels(5, 2.0)  # four to a row: two rows, three panels hidden
    assert axes.shape == (2, 4)
    assert [ax.get_visible() for ax in axes.flat] == [True] * 5 + [False] * 3
    assert tuple(fig.get_size_inches()) == (style.FULL_WIDTH_IN, 4.0)
    plt.close(fig)
    fig, axes = style.panels(1, 2.0)  # one panel: a column wide, unless told otherwise
    assert axes.shape == (1, 1) and fig.get_size_inches()[0] == style.COLUMN_WIDTH_IN
    plt.close(fig)
    fig, axes = style.panels(2, 1.5, ncols=3, sharey=True, width="full")
    axes[0, 0].set_ylim(0.0, 7.0)
    assert axes.shape == (1, 2) and axes[0, 1].get_ylim() == (0.0, 7.0)
    assert fig.get_size_inches()[0] == style.FULL_WIDTH_IN
    plt.close(fig)
