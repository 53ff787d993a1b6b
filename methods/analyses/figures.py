"""Figures of the in-context learners' analyses (matplotlib, headless).

Figures are built as ``matplotlib.figure.Figure`` objects, never through pyplot's figure
manager: a caller that keeps them (the in-memory recorder, a notebook) leaves nothing open
behind in a global registry ("More than 20 figures have been opened")."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

#: The colour of each series of these figures; the suite's figures and reports use the same
#: (a legend must never call one curve by another's name).
ICL_SERIES_COLOURS = {
    "model": "tab:blue",
    "GD (1 step)": "tab:orange",
    "ridge": "tab:green",
    "GD++ (K steps)": "tab:red",
}


def icl_curves_figure(curves) -> Figure:
    """Loss vs context size, and vs input / teacher scale, for the model, GD, GD++, ridge."""
    fig = Figure(figsize=(12, 3.6))
    axes = fig.subplots(1, 3)
    titles = {
        "context": "context points",
        "ood_input": "input scale alpha",
        "ood_teacher": "teacher scale alpha",
    }
    for ax, (name, points) in zip(axes, curves.items(), strict=True):
        xs = [x for x, _ in points]
        for i, label in enumerate(("model", "GD (1 step)", "ridge", "GD++ (K steps)")):
            if name != "context" and i == 2:
                continue  # ridge is computed for the context curve only
            ax.plot(xs, [v[i] for _, v in points], marker="o", label=label,
                    color=ICL_SERIES_COLOURS[label])  # fmt: skip
        ax.set_xlabel(titles[name])
        ax.set_yscale("log")
        ax.set_title(name.replace("_", " "))
        ax.legend(fontsize="small")  # each panel names its own series
    axes[0].set_ylabel("loss (0.5 squared error)")
    fig.tight_layout()
    return fig


def lsa_weights_figure(key_query, proj_value, repeat_curves, interpolation) -> Figure:
    """Heatmaps of W_K^T W_Q and P W_V per head; loss of the repeated layer vs GD; loss along
    the path from the trained to the constructed weights."""
    heads = key_query.shape[0]
    fig = Figure(figsize=(4 * (2 * heads + 2), 3.6))
    axes = fig.subplots(1, 2 * heads + 2)
    for h in range(heads):
        for ax, matrix, title in (
            (axes[2 * h], key_query[h], "W_K^T W_Q"),
            (axes[2 * h + 1], proj_value[h], "P W_V"),
        ):
            limit = float(matrix.abs().max()) or 1.0
            image = ax.imshow(matrix.numpy(), cmap="RdBu", vmin=-limit, vmax=limit)
            ax.set_title(f"{title} (head {h})")
            fig.colorbar(image, ax=ax, fraction=0.046)
    ax = axes[-2]
    for label, points in repeat_curves.items():
        style = "--" if label.startswith("GD") else "-"
        ax.plot([k for k, _ in points], [v for _, v in points], style, marker="o", label=label)
    ax.set_xlabel("repetitions K")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.legend(fontsize="small")
    ax.set_title("trained layer repeated vs GD")
    ax = axes[-1]
    if interpolation:
        ax.plot([a for a, _ in interpolation], [v for _, v in interpolation], marker="o")
    ax.set_xlabel("alpha (0: trained, 1: constructed)")
    ax.set_title("interpolation to the GD weights")
    fig.tight_layout()
    return fig
