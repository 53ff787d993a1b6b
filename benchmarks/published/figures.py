"""A published table's figure, drawn from the store with the paper's axes and series.

A table declares its figure (:class:`TableFigure`): panels, each with series of three kinds,

- :class:`Points`: the value of several lines of the table at x positions (a line per context
  size, say), each point the mean over the line's seeds with a band of one standard
  deviation (no band for one seed);
- :class:`History`: a metric one line's runs logged step by step (alignment over training,
  loss by context size), the mean over its seeds at each step with the same band;
- :class:`Level`: a number drawn as a horizontal line (a published or derived value).

The figure's data is kept as a table (:class:`benchmarks.results.report_figures.FigureData`)
written beside the picture as CSV; a series with no finished run is named as left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from benchmarks.results.report_figures import (
    COLOURS,
    Axis,
    Curve,
    FigureData,
    colour_for,
    draw,
    mean_curve,
)


@dataclass(frozen=True)
class Points:
    """The lines' values at x: ``lines`` is ((x, line label), ...); ``metric`` (default:
    each line's own) is read from the lines' runs."""

    label: str
    lines: tuple[tuple[float, str], ...]
    metric: str | None = None


@dataclass(frozen=True)
class History:
    """A metric history (``key``) of one line's runs; steps are multiplied by ``x_scale``."""

    label: str
    line: str
    key: str
    x_scale: float = 1.0


@dataclass(frozen=True)
class Level:
    """A horizontal line across the panel: at ``value`` (a published or derived number), or
    at the mean over seeds of ``line``'s final metric (a reference that is not trained, so
    that its history says nothing)."""

    label: str
    value: float | None = None
    line: str | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.line is None):
            raise ValueError(f"level {self.label!r}: give a value or a line, not both")


@dataclass(frozen=True)
class Fixed:
    """Numbers at x positions, as a paper gives them (published or derived; no band)."""

    label: str
    points: tuple[tuple[float, float], ...]


Series = Points | History | Level | Fixed


@dataclass(frozen=True)
class Panel:
    title: str
    xlabel: str
    ylabel: str
    series: tuple[Series, ...]
    log_x: bool = False
    log_y: bool = False

    def axis(self) -> Axis:
        return Axis(self.xlabel, self.ylabel, log_y=self.log_y, log_x=self.log_x)


@dataclass(frozen=True)
class TableFigure:
    """What the paper's figure shows (``source``: which figure, cited), as panels."""

    source: str
    panels: tuple[Panel, ...]

    def history_keys(self) -> set[str]:
        """The metrics whose histories the figure draws (shipped with the table's runs)."""
        return {series.key for panel in self.panels for series in panel.series
                if isinstance(series, History)}  # fmt: skip

    def lines(self) -> set[str]:
        """The table lines the figure reads."""
        named: set[str] = set()
        for panel in self.panels:
            for series in panel.series:
                if isinstance(series, Points):
                    named |= {label for _, label in series.lines}
                elif isinstance(series, History | Level) and series.line is not None:
                    named.add(series.line)
        return named


def validation_curves(source: str, *series: tuple[str, str]) -> TableFigure:
    """A figure of one panel: the validation loss over training of each (name, line)."""
    return TableFigure(source, (Panel(
        "Validation loss over training", "iteration", "loss (MSE)",
        tuple(History(name, line, "val/loss") for name, line in series), log_y=True),))  # fmt: skip


#: The runs of a line: seed -> (run id, final metrics).
LineRuns = Mapping[int, tuple[str, Mapping[str, float]]]


def _finite(runs: Mapping[str, LineRuns], line: str, metric: str) -> list[float]:
    """The line's finite values of ``metric``, one per seed that has it, in seed order (so
    that a mean's float sum does not depend on the order the store returned its runs)."""
    return [m[metric] for _, (_, m) in sorted(runs.get(line, {}).items())
            if metric in m and math.isfinite(m[metric])]  # fmt: skip


def figure_data(
    title: str,
    figure: TableFigure,
    runs: Mapping[str, LineRuns],
    metric_of: Mapping[str, str],
    history: Callable[[str, str], dict[int, float]],
) -> FigureData:
    """The figure's curves from each line's runs (``runs[label]``), the line's metric
    (``metric_of``) and the logged histories (``history(run_id, key)``)."""
    data = FigureData(title)
    for panel in figure.panels:
        curves: list[Curve] = []
        empty: list[str] = []
        # Colours the suite names are taken first, so that no other series gets one of them.
        used = {COLOURS[s.label] for s in panel.series if s.label in COLOURS}
        for series in panel.series:
            colour = colour_for(series.label, used)
            used.add(colour)
            if isinstance(series, Level):
                if series.line is None:
                    level, n = series.value, 0
                else:
                    values = _finite(runs, series.line, metric_of[series.line])
                    level, n = (sum(values) / len(values) if values else None), len(values)
                if level is None:
                    empty.append(series.label)
                else:
                    curves.append(Curve(panel.title, series.label, colour, [], [level], [None],
                                        [n]))  # fmt: skip
                continue
            if isinstance(series, Fixed):
                xs, ys = zip(*series.points, strict=True)
                curves.append(Curve(panel.title, series.label, colour, list(xs), list(ys),
                                    [None] * len(xs), [0] * len(xs)))  # fmt: skip
                continue
            if isinstance(series, Points):
                xs, means, stds, ns = [], [], [], []
                for x, line in series.lines:
                    values = _finite(runs, line, series.metric or metric_of[line])
                    if not values:
                        continue
                    mean = sum(values) / len(values)
                    std = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
                           if len(values) > 1 else None)  # fmt: skip
                    xs.append(x)
                    means.append(mean)
                    stds.append(std)
                    ns.append(len(values))
            else:
                histories = [history(run_id, series.key)  # in seed order, as _finite
                             for _, (run_id, _) in sorted(runs.get(series.line, {}).items())]
                xs, means, stds, ns = mean_curve([h for h in histories if h])
                xs = [x * series.x_scale for x in xs]
            if xs:
                curves.append(Curve(panel.title, series.label, colour, list(xs), means, stds, ns))
            else:
                empty.append(series.label)
        if any(c.x for c in curves):
            data.curves += curves
            data.omitted += [f"{panel.title}: {label}" for label in empty]
        else:
            data.omitted.append(panel.title)
    return data


def draw_table_figure(data: FigureData, figure: TableFigure):
    """The picture of ``data`` (None when no panel has a point)."""
    return draw(data, {panel.title: panel.axis() for panel in figure.panels})
