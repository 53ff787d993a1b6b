"""A self-contained static HTML report: leaderboards and the figures the protocols saved.

Images are embedded as data URIs and the style sheet is inline, so the page needs neither
a network nor the store to be viewed; it can be mailed or checked into a repository.
"""

from __future__ import annotations

import base64
import html
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import benchmarks
from benchmarks.leaderboard import Leaderboard
from benchmarks.leaderboard_formats import as_html_table
from benchmarks.references import REFERENCE_VERSION

#: The figures a protocol may save, in the order a reader wants them.
FIGURES = (
    "accuracy_matrix.png",
    "learning_curve.png",
    "icl_curves.png",
    "sparsity.png",
    "sparsity_by_depth.png",
)
#: Rows of a leaderboard whose figures are shown (the top of the ranking).
FIGURE_ROWS = 6

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table.leaderboard { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
table.leaderboard th, table.leaderboard td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
table.leaderboard td { text-align: right; }
table.leaderboard td:nth-child(2), table.leaderboard td:nth-child(3) { text-align: left; }
table.leaderboard tr.reference { color: #666; font-style: italic; background: #f6f6f6; }
table.leaderboard caption { caption-side: bottom; text-align: left; color: #555; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figure img { max-width: 480px; border: 1px solid #ddd; }
figcaption { font-size: 0.8em; color: #555; }
"""

# Marks the page as verified when every image decoded: read by the browser test.
_CHECK = """
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).length;
  document.body.dataset.images = String(images.length);
  document.body.dataset.broken = String(broken);
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


def _figures(client, board: Leaderboard) -> str:
    parts = []
    for row in board.ours[:FIGURE_ROWS]:
        run = row.runs[0]
        available = {a.path for a in client.list_artifacts(run.run_id)}
        for name in FIGURES:
            if name not in available:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                data = Path(client.download_artifacts(run.run_id, name, tmp)).read_bytes()
            uri = "data:image/png;base64," + base64.b64encode(data).decode()
            label = f"{row.method} ({board.config_label(row)}), seed {run.seed}: {name}"
            parts.append(
                f'<figure><img src="{uri}" alt="{html.escape(label)}">'
                f"<figcaption>{html.escape(label)}</figcaption></figure>"
            )
    return "".join(parts)


def report_page(client, boards: list[Leaderboard]) -> str:
    sections = []
    for board in boards:
        sections.append(f'<section id="{html.escape(board.benchmark)}">')
        sections.append(f"<h2>{html.escape(board.benchmark)}</h2>")
        sections.append(as_html_table(board))
        sections.append(_figures(client, board))
        sections.append("</section>")
    return standalone_page("mesabench report", sections)


def write_report(client, boards: list[Leaderboard], output: Path) -> Path:
    """Write ``index.html`` into ``output`` and return its path."""
    output.mkdir(parents=True, exist_ok=True)
    path = output / "index.html"
    path.write_text(report_page(client, boards), encoding="utf-8")
    return path
