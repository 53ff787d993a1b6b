"""Figures and tables saved as run artifacts (matplotlib, headless)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
from matplotlib import ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from methods.analyses.figures import ICL_SERIES_COLOURS  # noqa: E402

#: One colour per series label, in every panel and every figure (per run and in reports):
#: a legend must never call one curve by another's name.
SERIES_COLOURS = {
    **ICL_SERIES_COLOURS,
    "train loss": "tab:blue",
    "validation loss": "tab:orange",
    "seen tasks": "tab:blue",
    "all tasks": "tab:green",
    "current task": "tab:orange",
    "cumulative": "tab:blue",
    "recent window": "tab:orange",
    "all tensors": "tab:purple",
}


def sparsity_figure(
    history: list[tuple[int, dict[str, float]]], xlabel: str = "iteration"
) -> Figure:
    """Gradient sparsity of each parameter tensor over meta-training (or over tasks)."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    names = list(history[0][1])
    steps = [step for step, _ in history]
    for name in names:
        ax.plot(steps, [values[name] for _, values in history], label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("gradient sparsity (fraction gated off)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small", ncol=2)
    ax.set_title("Sparsity per parameter tensor")
    fig.tight_layout()
    return fig


def learning_curve_figure(curves: dict[str, list[tuple[int, float]]]) -> Figure:
    """Training and validation loss over meta-training (log scale)."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for name, points in curves.items():
        if points:
            steps, values = zip(*points, strict=True)
            ax.plot(steps, values, label=name, marker="o" if name.startswith("val") else None)
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Meta-training")
    fig.tight_layout()
    return fig


def sparsity_by_depth_figure(final: dict[str, float]) -> Figure:
    """Final gradient sparsity of each tensor in network order, input to output (as in the
    thesis' figure 4.1, centre): weights and the other tensors as two series."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    names = list(final)
    depth = range(len(names))
    weights = [i for i, n in enumerate(names) if n.endswith("weight") and "bn" not in n]
    others = [i for i in depth if i not in weights]
    ax.bar([i for i in weights], [final[names[i]] for i in weights], label="weights")
    ax.bar([i for i in others], [final[names[i]] for i in others], label="biases / norms")
    ax.set_xticks(list(depth), names, rotation=45, ha="right", fontsize="small")
    ax.set_ylabel("gradient sparsity")
    ax.set_ylim(0, 1.02)
    ax.set_title("Sparsity vs layer depth (input -> output)")
    ax.legend()
    fig.tight_layout()
    return fig


def sparsity_table(final: dict[str, float]) -> str:
    """CSV of the final sparsity of each tensor, in network order (input to output)."""
    rows = ["tensor,depth,sparsity"]
    rows += [f"{name},{depth},{value:.6f}" for depth, (name, value) in enumerate(final.items())]
    return "\n".join(rows) + "\n"


def sparsity_history_table(history: list[tuple[int, dict[str, float]]], axis: str) -> str:
    """CSV of each tensor's sparsity at every recorded point; the first column is ``axis``
    (e.g. "iteration", "tasks trained")."""
    names = list(history[0][1])
    rows = [axis.replace(" ", "_") + "," + ",".join(names)]
    rows += [f"{t}," + ",".join(f"{values[n]:.6f}" for n in names) for t, values in history]
    return "\n".join(rows) + "\n"


def accuracy_matrix_figure(matrix) -> Figure:
    """Heatmap of R[t, j]: accuracy on task j (columns) after training task t (rows)."""
    fig = Figure(figsize=(6, 5))
    ax = fig.subplots()
    image = ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="viridis")
    for axis in (ax.xaxis, ax.yaxis):  # tasks are whole numbers: no 2.5
        axis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlabel("evaluated task j")
    ax.set_ylabel("after training task t")
    ax.set_title("Accuracy matrix R[t, j]")
    fig.colorbar(image, ax=ax, label="accuracy")
    fig.tight_layout()
    return fig


def accuracy_matrix_table(matrix, initial=None) -> str:
    """CSV of the accuracy matrix; the row ``init`` is the untrained learner; an entry not
    scored (``evaluate="metrics"``) is an empty cell."""
    tasks = len(matrix)

    def cells(values) -> str:
        return ",".join("" if math.isnan(float(v)) else f"{float(v):.6f}" for v in values)

    rows = ["after_task," + ",".join(f"task_{j}" for j in range(tasks))]
    if initial is not None:
        rows.append("init," + cells(initial))
    for t in range(tasks):
        rows.append(f"{t}," + cells(matrix[t]))
    return "\n".join(rows) + "\n"


def online_accuracy_figure(
    correct_by_step, source_of_step, switched, source_names, window: int = 100
) -> Figure:
    """Test-then-train accuracy over the stream (moving average over ``window`` steps), with
    the hidden task switches as ticks coloured by the source the new task comes from
    (``source_of_step`` indexes ``source_names``)."""
    import numpy as np

    values = np.asarray(correct_by_step, dtype=float)
    window = max(1, min(window, len(values)))
    kernel = np.ones(window) / window
    smooth = np.convolve(np.nan_to_num(values), kernel, mode="valid")
    fig = Figure(figsize=(9, 4))
    ax = fig.subplots()
    ax.plot(np.arange(window, len(values) + 1), smooth, color="black", lw=1, label="accuracy")
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    switches = np.flatnonzero(np.asarray(switched))
    sources = np.asarray(source_of_step)
    for index, name in enumerate(source_names):
        at = switches[sources[switches] == index]
        colour = colours[index % len(colours)]
        ax.vlines(at, 0, 0.04, colors=colour, lw=0.8, label=f"switch to {name}")
    ax.set_xlabel("stream step")
    ax.set_ylabel(f"accuracy (mean of {window} steps)")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize="small", loc="lower right")
    ax.set_title("Online accuracy (test, then train)")
    fig.tight_layout()
    return fig


def online_accuracy_table(correct_by_step, source_of_step, switched, detected, source_names) -> str:
    """CSV, one row per stream step: accuracy, source, true switch, detected boundary."""
    lines = ["step,accuracy,source,switched,detected"]
    for step, (value, source, switch, found) in enumerate(
        zip(
            correct_by_step.tolist(),
            source_of_step.tolist(),
            switched.tolist(),
            detected.tolist(),
            strict=True,
        )  # fmt: skip
    ):
        lines.append(f"{step},{value:.4f},{source_names[source]},{int(switch)},{int(found)}")
    return "\n".join(lines) + "\n"
