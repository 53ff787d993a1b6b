"""A leaderboard written out: a terminal table, markdown, CSV, JSON or an HTML fragment.

Every format is made from the same cells (:func:`row_cells`), so they never disagree.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from typing import Any

from rich.table import Table

from benchmarks.leaderboard import Leaderboard, LeaderboardRow
from benchmarks.references import REFERENCE_VERSION

FORMATS = ("table", "markdown", "csv", "json", "html")


def _short(metric: str) -> str:
    return metric.removeprefix("final/")


def cell_text(board: Leaderboard, row: LeaderboardRow, metric: str) -> str:
    values = row.values(metric)
    if not values:
        return "-"
    mean, std = row.stat(metric)
    if not math.isfinite(mean):
        return "diverged" if values else "-"
    if row.is_reference:
        return f"{mean:.4f}"
    text = f"{mean:.4f} ± {std:.4f}"
    ci = row.ci95(metric)
    return text if ci is None else f"{text} (CI ±{ci:.4f})"


def row_cells(board: Leaderboard) -> list[dict[str, Any]]:
    """One dict per row: rank (or 'ref'), labels, and mean / std / CI of every column."""
    out, rank = [], 0
    for row in board.rows:
        if not row.is_reference:
            rank += 1
        time_mean = row.stat("final/train_time_s")[0]
        params_mean = row.stat("final/num_params")[0]
        cells = {
            "rank": "ref" if row.is_reference else str(rank),
            "method": row.method + (" *" if board.flagged(row) else ""),
            "config": board.config_label(row),
            "seeds": len(row.seeds) if not row.is_reference else "",
            "train_time_s": "" if math.isnan(time_mean) else f"{time_mean:.1f}",
            "num_params": "" if math.isnan(params_mean) else f"{params_mean:.0f}",
            "text": {m: cell_text(board, row, m) for m in board.columns},
            "stats": {},
            "reference": row.is_reference,
            "note": row.reference.note if row.reference else "",
            "run_ids": [r.run_id for r in row.runs],
            "versions": sorted(row.versions()),
        }
        for metric in board.columns:
            mean, std = row.stat(metric)
            cells["stats"][metric] = {
                "mean": None if math.isnan(mean) else mean,
                "std": None if math.isnan(std) or row.is_reference else std,
                "ci95": row.ci95(metric),
                "n": len(row.values(metric)),
            }
        out.append(cells)
    return out


def caption(board: Leaderboard) -> str:
    parts = [
        f"ranked by {_short(board.metric)} ({'higher' if board.higher else 'lower'} is better)"
    ]
    skipped = ", ".join(f"{n} {s.lower()}" for s, n in board.excluded.items() if n)
    if skipped:
        parts.append(f"not ranked: {skipped}")
    if any(board.flagged(r) for r in board.rows):
        parts.append(f"* runs from another suite version than {board.version}")
    if any(r.is_reference for r in board.rows):
        parts.append(f"ref = published number (reference table {REFERENCE_VERSION})")
    return "; ".join(parts)


_HEADERS = ("#", "method", "config")
_TAIL = ("seeds", "train time (s)", "params")


def _header(board: Leaderboard) -> list[str]:
    return [*_HEADERS, *(_short(c) for c in board.columns), *_TAIL]


def _line(cells: dict[str, Any], board: Leaderboard) -> list[str]:
    return [
        cells["rank"],
        cells["method"],
        cells["config"],
        *(cells["text"][c] for c in board.columns),
        str(cells["seeds"]),
        cells["train_time_s"],
        cells["num_params"],
    ]


def as_rich(board: Leaderboard) -> Table:
    table = Table(title=f"{board.benchmark}", caption=caption(board))
    for i, name in enumerate(_header(board)):
        table.add_column(name, justify="right" if i >= len(_HEADERS) or i == 0 else "left")
    for cells in row_cells(board):
        style = "dim italic" if cells["reference"] else None
        table.add_row(*_line(cells, board), style=style)
    return table


def as_markdown(board: Leaderboard) -> str:
    header = _header(board)
    lines = [f"### {board.benchmark}", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---" for _ in header) + "|")
    for cells in row_cells(board):
        line = [c.replace("|", "\\|") for c in _line(cells, board)]
        if cells["reference"]:
            line[1] = f"_{line[1]}_"
        lines.append("| " + " | ".join(line) + " |")
    lines += ["", caption(board), ""]
    return "\n".join(lines)


def as_csv(board: Leaderboard) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    stats_header = [f"{_short(c)}_{s}" for c in board.columns for s in ("mean", "std", "ci95")]
    writer.writerow(
        [
            "benchmark",
            "rank",
            "method",
            "config",
            *stats_header,
            "seeds",
            "train_time_s",
            "num_params",
            "reference",
        ]
    )
    for cells in row_cells(board):
        stats = []
        for metric in board.columns:
            s = cells["stats"][metric]
            stats += ["" if s[k] is None else repr(s[k]) for k in ("mean", "std", "ci95")]
        writer.writerow(
            [
                board.benchmark,
                cells["rank"],
                cells["method"],
                cells["config"],
                *stats,
                cells["seeds"],
                cells["train_time_s"],
                cells["num_params"],
                cells["reference"],
            ]
        )
    return buffer.getvalue()


def as_json_data(board: Leaderboard) -> dict[str, Any]:
    rows = row_cells(board)
    for cells in rows:
        cells.pop("text")
    return {
        "benchmark": board.benchmark,
        "metric": board.metric,
        "higher_is_better": board.higher,
        "columns": board.columns,
        "excluded": board.excluded,
        "suite_version": board.version,
        "reference_table": REFERENCE_VERSION,
        "rows": rows,
    }


def as_json(boards: list[Leaderboard]) -> str:
    return json.dumps([as_json_data(b) for b in boards], indent=2)


def as_html_table(board: Leaderboard) -> str:
    """An HTML ``<table>`` (no page around it): used by the report and ``--format html``."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in _header(board))
    body = []
    for cells in row_cells(board):
        css = ' class="reference"' if cells["reference"] else ""
        tds = "".join(f"<td>{html.escape(str(c))}</td>" for c in _line(cells, board))
        body.append(f"<tr{css}>{tds}</tr>")
    return (
        f'<table class="leaderboard" data-benchmark="{html.escape(board.benchmark)}">'
        f"<caption>{html.escape(caption(board))}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def render(boards: list[Leaderboard], fmt: str) -> str:
    """All boards in one text of format ``fmt`` (not ``table``, which prints rich tables)."""
    if fmt == "markdown":
        return "\n".join(as_markdown(b) for b in boards)
    if fmt == "csv":
        # One block per benchmark, each with its own header (their columns differ).
        return "".join(as_csv(b) for b in boards)
    if fmt == "json":
        return as_json(boards) + "\n"
    if fmt == "html":
        from benchmarks.report import standalone_page

        return standalone_page("mesabench leaderboard", [as_html_table(b) for b in boards])
    raise ValueError(f"format must be one of {', '.join(FORMATS)} (got {fmt!r})")
