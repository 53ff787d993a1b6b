"""A self-contained static HTML report: leaderboards and figures over every seed.

For the top rows of each leaderboard the report draws its own figures from the store
(:mod:`benchmarks.report_figures`): each curve is the mean over the row's seeds with a band
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
from datetime import datetime, timezone
from pathlib import Path

import benchmarks
from benchmarks.leaderboard_formats import as_html_table
from benchmarks.leaderboards import Leaderboard
from benchmarks.references import REFERENCE_VERSION

#: Per-run pictures shown beside the averaged curves (one per seed, labelled with it).
PER_RUN_FIGURES = ("accuracy_matrix.png", "sparsity_by_depth.png")
#: Rows of a leaderboard whose figures are shown (the top of the ranking).
FIGURE_ROWS = 6

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; font-size: 16px;
       line-height: 1.4; }
table.leaderboard { border-collapse: collapse; margin: 1em 0; font-size: 15px; }
table.leaderboard th, table.leaderboard td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
table.leaderboard td { text-align: right; }
table.leaderboard td:nth-child(2), table.leaderboard td:nth-child(3) { text-align: left; }
table.leaderboard tr.reference { color: #666; font-style: italic; background: #f6f6f6; }
table.leaderboard caption { caption-side: bottom; text-align: left; color: #444;
                            font-size: 14px; padding-top: 0.4em; max-width: 90em; }
figure { display: block; margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 14px; color: #444; }
"""

# Marks the page as verified when every image decoded, and records the smallest font size
# of any text and how much an image is scaled down: read by the browser test.
_CHECK = """
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).length;
  document.body.dataset.images = String(images.length);
  document.body.dataset.broken = String(broken);
  const sizes = Array.from(document.querySelectorAll("td, th, caption, figcaption, p"))
    .map(e => parseFloat(getComputedStyle(e).fontSize));
  document.body.dataset.minFont = String(Math.min(...sizes));
  const shrink = images.map(i => i.width / i.naturalWidth);
  document.body.dataset.minImageScale = String(Math.min(1, ...shrink));
});
"""


def standalone_page(title: str, sections: list[str]) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f"<script>{_CHECK}</script></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p>mesabench {benchmarks.__version__}, generated {stamp}; reference table "
        f"{REFERENCE_VERSION}.</p>" + "\n".join(sections) + "</body></html>\n"
    )


def _histories(client, run_ids: list[str]) -> dict[str, list[dict[int, float]]]:
    """Every panel's metric history of each run: key -> one {step: value} per run."""
    from benchmarks.report_figures import PANELS

    wanted = {key for panel in PANELS for key, _ in panel.series}
    out: dict[str, list[dict[int, float]]] = {}
    for run_id in run_ids:
        logged = client.get_run(run_id).data.metrics
        for key in wanted & set(logged):
            history = client.get_metric_history(run_id, key)
            out.setdefault(key, []).append({m.step: m.value for m in history})
    return out


def _image(data: bytes, label: str) -> str:
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    return f'<img src="{uri}" alt="{html.escape(label)}">'


def _figures(client, board: Leaderboard, output: Path) -> str:
    from benchmarks.report_figures import draw, figure_data

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
            import matplotlib.pyplot as plt

            plt.close(figure)
            note = f" {data.note()}." if data.omitted else ""
            parts.append(
                f"<figure>{_image(buffer.getvalue(), label)}<figcaption>"
                f"{html.escape(label)}: mean over seeds {html.escape(str(row.seeds))} with a "
                f"band of ±1 std.{html.escape(note)} "
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


def report_page(client, boards: list[Leaderboard], output: Path) -> str:
    sections = []
    for board in boards:
        sections.append(f'<section id="{html.escape(board.benchmark)}">')
        sections.append(f"<h2>{html.escape(board.benchmark)}</h2>")
        sections.append(as_html_table(board))
        sections.append(_figures(client, board, output))
        sections.append("</section>")
    return standalone_page("mesabench report", sections)


def write_report(client, boards: list[Leaderboard], output: Path) -> Path:
    """Write ``index.html`` (and each figure's PNG and CSV under ``figures/``) into
    ``output``; return the page's path."""
    output.mkdir(parents=True, exist_ok=True)
    path = output / "index.html"
    path.write_text(report_page(client, boards, output), encoding="utf-8")
    return path
