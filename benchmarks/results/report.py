"""A self-contained static HTML report: leaderboards and figures over every seed.

For the top rows of each leaderboard the report draws its own figures from the store
(:mod:`benchmarks.results.report_figures`): each curve is the mean over the row's seeds with a band
of one standard deviation, and the data of each figure is written beside it as CSV. Per-run
pictures that cannot be averaged (an accuracy heatmap, sparsity by depth) are shown for
each seed, labelled with it. Images are embedded as data URIs and the style sheet is inline,
so the page needs neither a network nor the store to be viewed.
"""

from __future__ import annotations

import base64
import html
import io
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.results.board import Leaderboard
from benchmarks.results.formats import as_html_table, standalone_page
from benchmarks.results.linter import finding_lines

#: Per-run pictures shown beside the averaged curves (one per seed, labelled with it).
PER_RUN_FIGURES = ("accuracy_matrix.png", "sparsity_by_depth.png")
#: Rows of a leaderboard whose figures are shown (the top of the ranking).
FIGURE_ROWS = 6

def _histories(client, run_ids: list[str]) -> dict[str, list[dict[int, float]]]:
    """Every panel's metric history of each run: key -> one {step: value} per run."""
    from benchmarks.results.report_figures import PANELS

    wanted = {key for panel in PANELS for key, _ in panel.series}
    out: dict[str, list[dict[int, float]]] = {}
    for run_id in run_ids:
        logged = client.get_run(run_id).data.metrics
        for key in wanted & set(logged):
            history = client.get_metric_history(run_id, key)
            out.setdefault(key, []).append({m.step: m.value for m in history})
    return out


def image_tag(data: bytes, label: str) -> str:
    """A PNG embedded as a data URI (the page needs neither the store nor a network)."""
    return _image(data, label)


def _image(data: bytes, label: str) -> str:
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    return f'<img src="{uri}" alt="{html.escape(label)}">'


def _figures(client, board: Leaderboard, output: Path) -> str:
    from benchmarks.results.report_figures import draw, figure_data

    parts = []
    for index, row in enumerate(board.ours[:FIGURE_ROWS], start=1):
        label = f"{row.method} ({board.config_label(row)})"
        data = figure_data(label, _histories(client, [r.run_id for r in row.runs]))
        figure = draw(data)
        if figure is not None:
            stem = f"{board.benchmark}-{index}-{row.method}"
            (output / "figures").mkdir(exist_ok=True)
            (output / "figures" / f"{stem}.csv").write_text(data.csv(), encoding="utf-8")
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=100)
            figure.savefig(output / "figures" / f"{stem}.png", dpi=100)
            note = f" {data.note()}." if data.omitted else ""
            spread = ("mean over seeds {} with a band of ±1 std" if len(row.seeds) > 1
                      else "seed {}: one run, no band").format(  # fmt: skip
                ", ".join(map(str, row.seeds)))
            parts.append(
                f"<figure>{_image(buffer.getvalue(), label)}<figcaption>"
                f"{html.escape(label)}: {html.escape(spread)}.{html.escape(note)} "
                f'<a href="figures/{html.escape(stem)}.csv">data (CSV)</a></figcaption></figure>'
            )
        elif data.omitted:
            parts.append(f"<p>{html.escape(label)}: {html.escape(data.note())}.</p>")
        for run in row.runs:
            available = {a.path for a in client.list_artifacts(run.run_id)}
            for name in PER_RUN_FIGURES:
                if name not in available:
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    raw = Path(client.download_artifacts(run.run_id, name, tmp)).read_bytes()
                caption = f"{label}, seed {run.seed}: {name}"
                parts.append(
                    f"<figure>{_image(raw, caption)}"
                    f"<figcaption>{html.escape(caption)}</figcaption></figure>"
                )
    return "".join(parts)


def _compute(board: Leaderboard, output: Path) -> str:
    """The board's rows by score against what they cost, the Pareto front marked."""
    from benchmarks.results.report_figures import ComputePoint, compute_figure

    points = []
    rows = [r for r in board.rows if not r.is_reference]
    repeated = {r.method for r in rows if sum(o.method == r.method for o in rows) > 1}
    for row in rows:
        score = row.stats(board.metric).mean
        if score is None:
            continue
        cost = {key: row.stats(key).mean for key in ("final/train_time_s", "final/step_flops")}
        label = row.method if row.method not in repeated else (
            f"{row.method} ({board.config_label(row)})")  # fmt: skip
        points.append(ComputePoint(label, score,
                                   cost["final/train_time_s"], cost["final/step_flops"]))
    figure = compute_figure(points, board.metric, board.higher)
    if figure is None:
        return ""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    (output / "figures").mkdir(exist_ok=True)
    figure.savefig(output / "figures" / f"{board.benchmark}-compute.png", dpi=100)
    label = f"{board.benchmark}: score against compute"
    return (f"<figure>{_image(buffer.getvalue(), label)}<figcaption>{html.escape(label)}: "
            "each ranked row at its mean training time and one training step's FLOPs "
            "(torch's counter); the red line joins the Pareto front, the rows nothing "
            "cheaper beats.</figcaption></figure>")


def aggregate_section(result, anchors: dict[str, str], output: Path) -> str:
    """The aggregate across benchmarks: its two tables, notes and figure (PNG and JSON
    written under ``figures/``)."""
    import json

    from benchmarks.results import aggregate as agg
    from benchmarks.results.formats import strict_json

    parts = ['<section id="aggregate">',
             f"<h2>aggregate over {html.escape(', '.join(result.benchmarks))}</h2>"]  # fmt: skip
    for headers, rows in (agg.summary_rows(result), agg.improvement_rows(result)):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                       for row in rows)  # fmt: skip
        parts.append(f'<table class="leaderboard"><thead><tr>{head}</tr></thead>'
                     f"<tbody>{body}</tbody></table>")  # fmt: skip
    parts += [f"<p>{html.escape(line)}</p>" for line in agg.notes(result, anchors)]
    fig = agg.figure(result)
    if fig is not None:
        (output / "figures").mkdir(parents=True, exist_ok=True)
        fig.savefig(output / "figures" / "aggregate.png", dpi=100)
        (output / "figures" / "aggregate.json").write_text(
            json.dumps(strict_json(agg.as_json_data(result, anchors)), indent=2))
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        label = "aggregate across benchmarks"
        parts.append(f"<figure>{_image(buffer.getvalue(), label)}<figcaption>IQM and mean of "
                     "the normalised scores with 95% stratified-bootstrap intervals (left); "
                     "the fraction of runs above each score tau, with bootstrap bands "
                     "(right). Data: figures/aggregate.json.</figcaption></figure>")
    parts.append("</section>")
    return "".join(parts)


def report_page(client, boards: list[Leaderboard], output: Path,
                extra: Sequence[str] = ()) -> str:  # fmt: skip
    sections = []
    for board in boards:
        sections.append(f'<section id="{html.escape(board.benchmark)}">')
        sections.append(f"<h2>{html.escape(board.benchmark)}</h2>")
        sections.append(as_html_table(board))
        sections += [f'<p class="flagged">{html.escape(line)}</p>' for line in finding_lines(board)]
        sections.append(_compute(board, output))
        sections.append(_figures(client, board, output))
        sections.append("</section>")
    return standalone_page("mesabench report", [*sections, *extra])


def write_report(client, boards: list[Leaderboard], output: Path,
                 extra: Sequence[str] = ()) -> Path:  # fmt: skip
    """Write ``index.html`` (and each figure's PNG and CSV under ``figures/``) into
    ``output``, with ``extra`` HTML sections after the boards; return the page's path."""
    output.mkdir(parents=True, exist_ok=True)
    path = output / "index.html"
    path.write_text(report_page(client, boards, output, extra), encoding="utf-8")
    return path
