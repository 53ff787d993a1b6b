"""The report's section for published tables: each table with runs in the store, judged at
the preset most of its lines ran at, with its figure drawn from the store."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from benchmarks.published.claims import PRESETS, Table
from benchmarks.published.reproduce import (
    HEADERS,
    Outcome,
    judged,
    rows,
    verdict_counts,
    write_figure,
)
from benchmarks.sweeps.spec import parse_seeds


def best_outcome(table: Table, reader) -> Outcome | None:
    """The table judged at the preset with the most lines run (the larger budget of a tie);
    None when no line has run at any."""
    best, most = None, 0
    for preset in reversed(PRESETS):  # paper, cpu, quick: the larger budget wins a tie
        outcome = judged(table, preset, parse_seeds(table.seeds), reader)
        ran = sum(line.verdict != "not run" for line in outcome.lines)
        if ran > most:
            best, most = outcome, ran
    return best


def table_sections(client, reader, tables: Sequence[Table], output: Path) -> list[str]:
    """HTML for each table that has runs: its verdicts and its figure (the PNG and its CSV
    written under ``output/figures``)."""
    from benchmarks.results.report import image_tag

    sections = []
    for table in tables:
        outcome = best_outcome(table, reader)
        if outcome is None:
            continue
        head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
        body = "".join(
            f'<tr data-verdict="{html.escape(line.verdict)}">'
            + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
            for line, row in zip(outcome.lines, rows(outcome), strict=True)
        )  # fmt: skip
        parts = [
            f'<section id="table-{html.escape(table.name)}">',
            f"<h2>{html.escape(table.title)} ({html.escape(table.name)})</h2>",
            f"<p>{html.escape(table.source)}. Preset {html.escape(outcome.preset)}, seeds "
            f"{', '.join(map(str, outcome.seeds))}. {html.escape(table.note)}</p>",
            f'<table class="leaderboard"><caption>verdicts: '
            f"{html.escape(verdict_counts(outcome))}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>",
        ]
        png = write_figure(outcome, client, output / "figures")
        if png is not None:
            caption = f"{table.figure.source}: mean over seeds with a band of ±1 std"
            data = html.escape(png.with_suffix(".csv").name)
            parts.append(
                f"<figure>{image_tag(png.read_bytes(), caption)}<figcaption>"
                f'{html.escape(caption)}. <a href="figures/{data}">data (CSV)</a>'
                "</figcaption></figure>"
            )
        parts.append("</section>")
        sections.append("".join(parts))
    return sections
