"""Report figures: legends match their series, curves are means over seeds with a band,
panels without data are left out with a note."""

from __future__ import annotations

import csv
import io
import math
import statistics

import matplotlib.colors as mcolors
import pytest

from benchmarks.protocols.figures import SERIES_COLOURS
from benchmarks.results.report_figures import draw, figure_data
from methods.analyses.figures import icl_curves_figure


def _legend_matches_artists(fig) -> list[tuple[str, str, str]]:
    """(panel, label, colour) of every legend entry, after checking that the entry's colour
    is the colour of the plotted line with that label in the same axis."""
    entries = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        lines = {line.get_label(): line for line in ax.get_lines()}
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            label = text.get_text()
            assert label in lines, (ax.get_title(), label)
            drawn = mcolors.to_hex(lines[label].get_color())
            assert mcolors.to_hex(handle.get_color()) == drawn, (ax.get_title(), label)
            assert drawn == mcolors.to_hex(SERIES_COLOURS[label]), (ax.get_title(), label)
            entries.append((ax.get_title(), label, drawn))
    return entries


def test_the_per_run_icl_figure_gives_each_series_its_own_colour_in_every_panel():
    values = (1.0, 2.0, 3.0, 4.0)
    curves = {
        "context": [(n, values) for n in (1, 2, 3)],
        "ood_input": [(a, values) for a in (0.5, 1.0, 2.0)],
        "ood_teacher": [(a, values) for a in (0.5, 1.0, 2.0)],
    }
    entries = _legend_matches_artists(icl_curves_figure(curves))
    gdpp = {colour for _, label, colour in entries if label == "GD++ (K steps)"}
    ridge = {colour for _, label, colour in entries if label == "ridge"}
    assert len(gdpp) == 1 and len(ridge) == 1 and gdpp != ridge  # the issue-16 bug
    assert {p for p, label, _ in entries if label == "ridge"} == {"context"}


def test_curves_are_the_mean_over_seeds_with_a_std_band():
    seeds = [
        {"train/loss": {10: 1.0, 20: 0.5}, "val/loss": {20: 0.7}},
        {"train/loss": {10: 1.2, 20: 0.4}, "val/loss": {20: 0.9}},
        {"train/loss": {10: 0.8, 20: math.nan}, "val/loss": {20: 0.8}},  # diverged at 20
    ]
    histories = {key: [s[key] for s in seeds] for key in ("train/loss", "val/loss")}
    data = figure_data("maml", histories)
    table = list(csv.DictReader(io.StringIO(data.csv())))
    train = [r for r in table if r["series"] == "train loss"]
    assert [float(r["x"]) for r in train] == [10.0, 20.0]
    assert float(train[0]["mean"]) == pytest.approx(1.0)
    assert float(train[0]["std_over_seeds"]) == pytest.approx(statistics.stdev([1.0, 1.2, 0.8]))
    assert int(train[1]["n_seeds"]) == 2  # the non-finite value is left out of its step
    assert float(train[1]["mean"]) == pytest.approx(0.45)
    (val,) = [r for r in table if r["series"] == "validation loss"]  # one point: still shown
    assert float(val["mean"]) == pytest.approx(0.8) and int(val["n_seeds"]) == 3
    fig = draw(data)
    entries = _legend_matches_artists(fig)
    assert {label for _, label, _ in entries} == {"train loss", "validation loss"}
    for _, label, colour in entries:  # the CSV names the colour the figure drew
        assert {mcolors.to_hex(r["colour"]) for r in table if r["series"] == label} == {colour}
    (ax,) = fig.axes
    bands = ax.collections  # fill_between: one band per series with >= 2 seeds
    assert len(bands) == 2
    # The diverged seed leaves step 20 with two: the title gives the range, not the most.
    assert "mean over 2-3 seeds" in fig._suptitle.get_text()


def test_ood_panels_have_no_ridge_and_panels_without_data_are_left_out():
    one = [{100: 1.0, 200: 3.0}]
    histories = {
        "analysis/context_model": [{1: 2.0, 2: 1.0}],
        "analysis/context_gd": [{1: 2.5, 2: 1.2}],
        "analysis/context_ridge": [{1: 3.0, 2: 0.9}],
        "analysis/context_gdpp": [{1: 2.2, 2: 1.1}],
        "analysis/ood_input_model": one,
        "analysis/ood_input_gd": one,
        "analysis/ood_input_gdpp": one,
        "train/loss": [{10: math.nan}],  # a run that diverged at its only logged step
    }
    data = figure_data("lsa", histories)
    assert data.omitted == ["Training loss"] and "Training loss" in data.note()
    fig = draw(data)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["Loss vs context size", "OOD: input scale"]
    entries = _legend_matches_artists(fig)
    ood = {label: colour for panel, label, colour in entries if panel == "OOD: input scale"}
    assert set(ood) == {"model", "GD (1 step)", "GD++ (K steps)"}
    assert [x for x in fig.axes[1].get_lines()[0].get_xdata()] == [1.0, 2.0]  # alpha, not 100
    assert len(fig.axes[0].collections) == 0  # one seed: no band


def test_a_published_figure_never_gives_two_series_one_colour():
    """A series the suite names keeps its colour; the others take colours not already used
    in the panel (here "GD (1 step)" is orange, which the cycle would give the second line)."""
    from benchmarks.published.figures import Panel, Points, TableFigure
    from benchmarks.published.figures import figure_data as table_figure_data

    panel = Panel("p", "x", "y", (Points("a", ((1, "a1"),)), Points("b", ((1, "b1"),)),
                                   Points("GD (1 step)", ((1, "g1"),))))  # fmt: skip
    runs = {label: {0: ("r", {"m": 1.0})} for label in ("a1", "b1", "g1")}
    data = table_figure_data("t", TableFigure("src", (panel,)), runs,
                             dict.fromkeys(runs, "m"), lambda run, key: {})  # fmt: skip
    colours = {c.label: c.colour for c in data.curves}
    assert colours["GD (1 step)"] == "tab:orange"
    assert len(set(colours.values())) == 3


def test_figures_kept_by_a_caller_leave_nothing_open_in_pyplot():
    """Thirty figures built and kept (as the in-memory recorder keeps a run's) open no
    pyplot figure: matplotlib's "More than 20 figures have been opened" cannot come."""
    import matplotlib.pyplot as plt
    import torch

    from benchmarks.protocols.figures import accuracy_matrix_figure
    from methods.analyses.figures import lsa_weights_figure

    plt.close("all")
    curves = {name: [(1, (1.0, 2.0, 3.0, 4.0))] for name in ("context", "ood_input",
                                                                "ood_teacher")}  # fmt: skip
    kept = []
    for _ in range(10):
        kept.append(icl_curves_figure(curves))
        kept.append(accuracy_matrix_figure(torch.rand(3, 3).numpy()))
        kept.append(lsa_weights_figure(torch.rand(1, 3, 3), torch.rand(1, 3, 3),
                                       {"model": [(1, 1.0)]}, [(0.0, 1.0)]))  # fmt: skip
    assert plt.get_fignums() == [] and len(kept) == 30


def test_whole_number_axes_get_whole_ticks_and_log_only_where_the_range_is_wide():
    """A one-iteration run's curve: its one step as the tick (not 0.96 ... 1.04); a loss
    from 2.4 to 2.26 on a linear axis (a log one would read 2.3x10^0); one falling over a
    factor of 100 on a log axis; the accuracy matrix of 20 tasks labels whole tasks."""
    import torch

    from benchmarks.protocols.figures import accuracy_matrix_figure

    one = draw(figure_data("maml", {"train/loss": [{1: 3.0}], "val/loss": [{1: 4.5}]}))
    (ax,) = one.axes
    assert list(ax.get_xticks()) == [1.0] and ax.get_yscale() == "linear"
    narrow = draw(figure_data("sgd", {"train/loss": [{25: 2.4, 50: 2.26}]}))
    assert narrow.axes[0].get_yscale() == "linear"
    assert all(float(t).is_integer() for t in narrow.axes[0].get_xticks())
    wide = draw(figure_data("sgd", {"train/loss": [{25: 2.4, 50: 0.02}]}))
    assert wide.axes[0].get_yscale() == "log"
    matrix = accuracy_matrix_figure(torch.rand(20, 20).numpy())
    ticks = [*matrix.axes[0].get_xticks(), *matrix.axes[0].get_yticks()]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_the_pareto_front_keeps_what_nothing_cheaper_beats():
    from benchmarks.results.report_figures import ComputePoint, compute_figure, pareto_front

    # (cost, score), higher is better: c is beaten by a (cheaper, better); d by b.
    points = [(1.0, 0.5), (10.0, 0.9), (5.0, 0.4), (20.0, 0.85), (100.0, 0.95)]
    assert pareto_front(points, higher=True) == [0, 1, 4]
    losses = [(1.0, 0.5), (10.0, 0.2), (5.0, 0.6), (2.0, 0.5)]  # lower is better
    assert pareto_front(losses, higher=False) == [0, 1]
    rows = [ComputePoint(f"m{i}", y, x, x * 1e6) for i, (x, y) in enumerate(points)]
    fig = compute_figure(rows, "final/test_accuracy", higher=True)
    assert [ax.get_xlabel() for ax in fig.axes] == ["training time (s)",
                                                    "FLOPs of one training step"]  # fmt: skip
    (front,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "Pareto front"]
    assert list(front.get_xdata()) == [1.0, 10.0, 100.0]
    assert compute_figure([ComputePoint("a", 0.5, None, None)], "final/x", True) is None
