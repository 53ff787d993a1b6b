"""The report's figures, drawn from the store over every seed of a leaderboard row.

Curves are the mean over the row's seeds at each step with a band of one standard
deviation over seeds (no band for one seed); a panel whose series have no points is left
out and named in the figure's note. Every series has one colour wherever it appears
(:data:`COLOURS`), so a legend never calls one curve by another's name. Each figure comes
with the table it was drawn from (:class:`FigureData`), which the report writes beside it
as CSV and the tests compare with the figure's own artists.
"""

from __future__ import annotations

import csv
import io
import math
import textwrap
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from benchmarks.protocols.figures import SERIES_COLOURS  # noqa: E402

#: One colour per series label, in every panel and every figure.
COLOURS = SERIES_COLOURS
FONT_SIZE = 11


@dataclass(frozen=True)
class Axis:
    """How one panel is drawn: its labels and scales."""

    xlabel: str
    ylabel: str
    log_y: bool = False
    log_x: bool = False


#: Colours for series the suite's figures do not name (a published table's), in order.
_CYCLE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
          "tab:pink", "tab:gray", "tab:olive", "tab:cyan")  # fmt: skip


def colour_for(label: str, used: set[str]) -> str:
    """The series' fixed colour where the suite names it, else the first colour of the
    cycle not yet ``used`` in its panel (a legend never shows one colour twice)."""
    if label in COLOURS:
        return COLOURS[label]
    return next((c for c in _CYCLE if c not in used), _CYCLE[len(used) % len(_CYCLE)])


@dataclass(frozen=True)
class Panel:
    """One axis of a row's figure: a title, an x label, a scale and its series."""

    title: str
    xlabel: str
    ylabel: str
    series: tuple[tuple[str, str], ...]  # (metric history key, label)
    log_y: bool = False
    x_scale: float = 1.0  # steps are stored as integers: OOD scales are alpha * 100


PANELS = (
    Panel(
        "Training loss",
        "logged step",
        "loss",
        (("train/loss", "train loss"), ("val/loss", "validation loss")),
        log_y=True,
    ),  # fmt: skip
    Panel(
        "Accuracy over the stream",
        "tasks trained",
        "accuracy",
        (
            ("continual/accuracy_seen_tasks", "seen tasks"),
            ("continual/accuracy_all_tasks", "all tasks"),
            ("continual/accuracy_current_task", "current task"),
        ),
    ),  # fmt: skip
    Panel(
        "Online accuracy (test, then train)",
        "stream step",
        "accuracy",
        (("online/accuracy_so_far", "cumulative"), ("online/accuracy_window", "recent window")),
    ),  # fmt: skip
    Panel(
        "Loss vs context size",
        "context points",
        "loss",
        (
            ("analysis/context_model", "model"),
            ("analysis/context_gd", "GD (1 step)"),
            ("analysis/context_ridge", "ridge"),
            ("analysis/context_gdpp", "GD++ (K steps)"),
        ),
        log_y=True,
    ),  # fmt: skip
    Panel(
        "OOD: input scale",
        "input scale alpha",
        "loss",
        (
            ("analysis/ood_input_model", "model"),
            ("analysis/ood_input_gd", "GD (1 step)"),
            ("analysis/ood_input_gdpp", "GD++ (K steps)"),
        ),
        log_y=True,
        x_scale=0.01,
    ),  # fmt: skip
    Panel(
        "OOD: teacher scale",
        "teacher scale alpha",
        "loss",
        (
            ("analysis/ood_teacher_model", "model"),
            ("analysis/ood_teacher_gd", "GD (1 step)"),
            ("analysis/ood_teacher_gdpp", "GD++ (K steps)"),
        ),
        log_y=True,
        x_scale=0.01,
    ),  # fmt: skip
    Panel(
        "Gradient sparsity", "step", "fraction gated off", (("sparsity/overall", "all tensors"),)
    ),  # fmt: skip
)


@dataclass
class Curve:
    """A series' mean and standard deviation over seeds at each step."""

    panel: str
    label: str
    colour: str
    x: list[float]
    mean: list[float]
    std: list[float | None]  # None where fewer than two seeds have the step
    n: list[int]


@dataclass
class FigureData:
    """What a figure shows, as data: its curves and the panels left out for lack of it."""

    title: str
    curves: list[Curve] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)

    def csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["panel", "series", "colour", "x", "mean", "std_over_seeds", "n_seeds"])
        for c in self.curves:
            if not c.x:  # a level: one value across the panel
                writer.writerow([c.panel, c.label, c.colour, "", repr(c.mean[0]), "", c.n[0]])
                continue
            for x, mean, std, n in zip(c.x, c.mean, c.std, c.n, strict=True):
                writer.writerow([c.panel, c.label, c.colour, repr(x), repr(mean),
                                 "" if std is None else repr(std), n])  # fmt: skip
        return buffer.getvalue()

    def note(self) -> str:
        if not self.omitted:
            return ""
        return "no data, left out: " + ", ".join(self.omitted)


def mean_curve(histories: list[dict[int, float]]) -> tuple[list, list, list, list]:
    """Steps, mean, std over seeds (ddof 1; None below two) and n, from one history per seed.
    Non-finite values (a diverged seed) are left out of that step."""
    steps = sorted({s for h in histories for s in h})
    xs, means, stds, ns = [], [], [], []
    for step in steps:
        values = [h[step] for h in histories if step in h and math.isfinite(h[step])]
        if not values:
            continue
        mean = sum(values) / len(values)
        std = (
            math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            if len(values) > 1
            else None
        )
        xs.append(step)
        means.append(mean)
        stds.append(std)
        ns.append(len(values))
    return xs, means, stds, ns


def figure_data(title: str, histories: dict[str, list[dict[int, float]]]) -> FigureData:
    """Curves of the panels that apply, from ``histories[key]`` (one dict per seed).

    A panel applies when the runs logged any of its keys; one whose series hold no finite
    point is listed as omitted.
    """
    data = FigureData(title)
    for panel in PANELS:
        keys = [key for key, _ in panel.series if key in histories]
        if not keys:
            continue  # not this protocol's panel
        curves = []
        for key, label in panel.series:
            if key not in histories:
                continue
            xs, means, stds, ns = mean_curve(histories[key])
            if xs:
                scaled = [x * panel.x_scale for x in xs]
                curves.append(Curve(panel.title, label, COLOURS[label], scaled, means, stds, ns))
        if curves:
            data.curves += curves
        else:
            data.omitted.append(panel.title)
    return data


def draw(data: FigureData, axes_of: dict[str, Axis] | None = None) -> Figure | None:
    """The figure of ``data``: one axis per panel with curves, mean line and std band; a
    curve without x (a level) is a dashed horizontal line. ``axes_of`` gives each panel's
    labels and scales (default: the report's :data:`PANELS`)."""
    panels = list(dict.fromkeys(c.panel for c in data.curves))
    if not panels:
        return None
    spec = axes_of or {p.title: Axis(p.xlabel, p.ylabel, p.log_y) for p in PANELS}
    with plt.rc_context({"font.size": FONT_SIZE}):
        # At most two panels a line: the figure stays ~1000 px wide, shown unscaled.
        columns = min(2, len(panels))
        lines = math.ceil(len(panels) / columns)
        fig = Figure(figsize=(5.2 * columns, 3.8 * lines + 0.4))
        axes = fig.subplots(lines, columns, squeeze=False)
        for ax in axes.flat[len(panels) :]:
            ax.remove()
        for ax, title in zip(axes.flat, panels, strict=False):
            panel = spec[title]
            for curve in (c for c in data.curves if c.panel == title):
                if not curve.x:  # a level across the panel
                    ax.axhline(curve.mean[0], color=curve.colour, linestyle="--",
                               label=curve.label)  # fmt: skip
                    continue
                marker = "o" if len(curve.x) < 12 else None
                ax.plot(curve.x, curve.mean, color=curve.colour, label=curve.label,
                        marker=marker)  # fmt: skip
                band = [(x, m, s) for x, m, s in zip(curve.x, curve.mean, curve.std, strict=True)
                        if s is not None]  # fmt: skip
                if len(band) == 1:  # one point: a band would not show, an error bar does
                    (x, m, sd), = band
                    ax.errorbar([x], [m], yerr=[sd], color=curve.colour, capsize=4)
                elif band:
                    xs = [b[0] for b in band]
                    ax.fill_between(xs, [m - s for _, m, s in band], [m + s for _, m, s in band],
                                    color=curve.colour, alpha=0.2, linewidth=0)  # fmt: skip
            values = [v for c in data.curves if c.panel == title for v in c.mean
                      if v is not None and math.isfinite(v)]  # fmt: skip
            # Log only over a range worth it: on less than a factor of 10 a log axis shows
            # 2.3x10^0, 2.4x10^0 ... and nothing gained.
            if panel.log_y and values and min(values) > 0 and max(values) >= 10 * min(values):
                ax.set_yscale("log")
            xs = sorted({x for c in data.curves if c.panel == title for x in c.x})
            if xs and all(float(x).is_integer() for x in xs):  # steps, tasks: whole numbers
                ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
                if len(xs) == 1:  # one point: its own tick, not 0.96 ... 1.04
                    ax.set_xticks(xs)
            if panel.log_x and xs and xs[0] > 0:
                ax.set_xscale("log")
                if len(xs) <= 12:  # label the points' own x, not every minor tick
                    ax.set_xticks(xs)
                    ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
                    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            ax.set_title(title)
            ax.set_xlabel(panel.xlabel)
            ax.set_ylabel(panel.ylabel)
            ax.legend(fontsize=FONT_SIZE - 1)
        counts = [n for c in data.curves for n in c.n]
        fewest, seeds = min(counts, default=0), max(counts, default=0)
        band = "band: ±1 std over seeds" if seeds > 1 else "one seed: no band"
        # Series may have fewer seeds than others (a run unfinished): say the range.
        over = f"{fewest}-{seeds} seeds" if fewest != seeds else f"{seeds} seed(s)"
        # Wrapped to the figure's width: a one-panel figure is narrow.
        title = textwrap.fill(f"{data.title} — mean over {over}; {band}",
                              width=52 * columns)  # fmt: skip
        fig.suptitle(title, fontsize=FONT_SIZE + 1)
        fig.tight_layout()
    return fig


# -- compute on the axis ----------------------------------------------------------------------
@dataclass(frozen=True)
class ComputePoint:
    """One leaderboard row: its score (mean over seeds) and what it cost (means over its
    runs): training wall time and one training step's FLOPs (None where not recorded)."""

    label: str
    score: float
    seconds: float | None
    flops: float | None


def pareto_front(points: list[tuple[float, float]], higher: bool) -> list[int]:
    """Indices of the points no other point beats: at most the cost (x) and at least as
    good a score (y), better in one. In order of cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1] if higher
                                                      else points[i][1]))  # fmt: skip
    front, best = [], None
    for i in order:
        score = points[i][1]
        if best is None or (score > best if higher else score < best):
            front.append(i)
            best = score
    return front


def compute_figure(points: list[ComputePoint], metric: str, higher: bool) -> Figure | None:
    """The rows' score against their training time and one step's FLOPs (log x), each
    row a labelled point; the Pareto front (nothing cheaper scores better) joined and
    marked. None when no row recorded a cost."""
    axes_of = [(name, [(p.seconds if name == "time" else p.flops, p) for p in points])
               for name in ("time", "flops")]  # fmt: skip
    panels = [(name, [(x, p) for x, p in pairs if x is not None and x > 0])
              for name, pairs in axes_of]  # fmt: skip
    panels = [(name, pairs) for name, pairs in panels if pairs]
    if not panels:
        return None
    with plt.rc_context({"font.size": FONT_SIZE}):
        fig = Figure(figsize=(6.0 * len(panels), 4.4))
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (name, pairs) in zip(axes, panels, strict=True):
            xy = [(x, p.score) for x, p in pairs]
            front = pareto_front(xy, higher)
            ax.scatter([x for x, _ in xy], [y for _, y in xy], color="tab:blue", zorder=3)
            for x, p in pairs:
                ax.annotate(p.label, (x, p.score), textcoords="offset points", xytext=(4, 4),
                            fontsize=FONT_SIZE - 2)  # fmt: skip
            ax.plot([xy[i][0] for i in front], [xy[i][1] for i in front], color="tab:red",
                    drawstyle="steps-post", label="Pareto front", zorder=2)  # fmt: skip
            ax.scatter([xy[i][0] for i in front], [xy[i][1] for i in front], s=90,
                       facecolors="none", edgecolors="tab:red", zorder=4)  # fmt: skip
            ax.set_xscale("log")
            low, high = min(x for x, _ in xy), max(x for x, _ in xy)
            ax.set_xlim(low / 2, high * 4)  # room for the labels right of the points
            ax.set_xlabel("training time (s)" if name == "time"
                          else "FLOPs of one training step")  # fmt: skip
            ax.set_ylabel(f"{metric.removeprefix('final/')} ({'higher' if higher else 'lower'} "
                          "is better)")  # fmt: skip
            ax.legend(fontsize=FONT_SIZE - 1)
        fig.suptitle("score against compute (mean over seeds)", fontsize=FONT_SIZE + 1)
        fig.tight_layout()
    return fig
