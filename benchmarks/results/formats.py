"""A leaderboard written out: a terminal table, markdown, CSV, JSON or an HTML fragment.

Every format is made from the same cells (:func:`row_cells`), so they never disagree. The
statistics are named in every header: ``n`` is the number of seeds, ``std`` the sample
standard deviation over seeds (ddof 1), ``95% CI`` the Student-t interval of the mean over
seeds, and ``episode CI95`` the runs' own interval over their test episodes (a different
quantity). The JSON fields are documented in docs/leaderboard-json.md.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from rich.table import Table

from benchmarks.catalog.references import REFERENCE_VERSION
from benchmarks.results.board import Leaderboard, LeaderboardRow
from benchmarks.results.linter import row_findings
from benchmarks.results.multiple_tests import MOST_SEEDS
from benchmarks.results.statistics import CONFIDENCE
from benchmarks.store.bundles import IMPORTED_FROM_TAG, SOURCE_RUN_TAG
from mesabench_core import __version__

FORMATS = ("table", "markdown", "csv", "json", "html", "latex")
#: Version of the JSON layout (docs/leaderboard-json.md).
JSON_SCHEMA = 3


def _short(metric: str) -> str:
    return metric.removeprefix("final/")


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _metric_cells(row: LeaderboardRow, metric: str) -> dict[str, Any]:
    stats = row.stats(metric)
    return {
        "n": stats.n,
        "mean": _finite(stats.mean),
        "std": _finite(stats.std),
        "ci95_low": _finite(stats.ci_low),
        "ci95_high": _finite(stats.ci_high),
        "episode_ci95": None if row.is_reference else _finite(row.episode_ci95(metric)),
        "diverged_fraction": None if row.is_reference else row.diverged_fraction(metric),
    }


def _paired(row: LeaderboardRow, board: Leaderboard) -> dict[str, Any] | None:
    test = row.versus_baseline
    if test is None or board.baseline is None:
        return None
    adjusted = row.versus_baseline_holm
    return {
        "baseline": board.baseline.method,
        "pairs": test.n,
        "difference": _finite(test.difference),
        "ci95_half_width": _finite(test.ci95),
        "p_value": _finite(test.p_value),
        # Adjusted over the board's paired tests (Holm); significance is read from it.
        "p_value_holm": _finite(adjusted),
        "tests": _paired_tests(board),
        "significant": adjusted is not None and adjusted < 1.0 - CONFIDENCE,
        "seeds_for_80_power": row.seeds_for_power,
    }


def _paired_tests(board: Leaderboard) -> int:
    return sum(1 for r in board.ours if r.versus_baseline is not None
               and r.versus_baseline.p_value is not None)  # fmt: skip


def row_cells(board: Leaderboard) -> list[dict[str, Any]]:
    """One dict per row (ranked, unranked, references apart), with plain JSON values."""
    out, rank = [], 0
    for row in board.all_rows():
        status = row.status
        if status == "ranked":
            rank += 1
        time_mean = row.stats("final/train_time_s").mean
        params_mean = row.stats("final/num_params").mean
        ref = row.reference
        out.append(
            {
                "rank": rank if status == "ranked" else None,
                # Not significantly worse than rank 1 of ours (paired, Holm, 5%); null
                # where that cannot be said (rank 1 itself, under two shared seeds).
                "tied_with_best": row.tied_with_best,
                "status": status,
                "method": row.method,
                "other_version": board.flagged(row),
                "config": board.config_label(row)
                + ("; settings differ" if status == "reference, settings differ" else ""),
                "n": 0 if ref else len(row.seeds),
                "seeds": [] if ref else row.seeds,
                "stats": {m: _metric_cells(row, m) for m in board.columns},
                "versus_baseline": _paired(row, board),
                # The protocol linter's findings on this row (empty: none).
                "flagged": row_findings(row),
                "pooled": row.pooled,
                "other_setting": {
                    k: {"this_row": mine, "ranked": ranked}
                    for k, (mine, ranked) in row.other_setting.items()
                },
                "train_time_s": None if ref else _finite(time_mean),
                "num_params": None if ref or params_mean is None else int(round(params_mean)),
                "reference": None if ref is None else {
                    "kind": ref.kind,
                    "source": ref.source,
                    "note": ref.note,
                    "settings": {k: v for k, v in ref.settings.items()},
                    "settings_differ": {
                        k: {"ours": o, "theirs": t} for k, (o, t) in row.settings_differ.items()
                    },
                },
                # A tune's selected configuration: its budget, space and selection.
                "tuned": row.tuned,
                "run_ids": [r.run_id for r in row.runs],
                # Runs that came from a bundle: their source run ids and bundles.
                "imported": [{"run_id": r.run_id, "source_run": r.tags.get(SOURCE_RUN_TAG),
                              "bundle": r.tags.get(IMPORTED_FROM_TAG)}
                             for r in row.imported],
                "versions": sorted(row.versions()),
            }
        )  # fmt: skip
    return out


# -- text ---------------------------------------------------------------------------------
def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _share(fraction: float) -> str:
    """A fraction as a percentage that never rounds a few diverged tasks to 0%."""
    if 0 < fraction < 0.01:
        return f"{fraction * 100:.2g}%"
    return f"{fraction:.0%}"


def stat_text(cells: dict[str, Any], status: str) -> str:
    """``mean ± std [low, high]``; one value alone where there is no spread."""
    if cells["mean"] is None:
        if cells["n"] and status != "reference, settings differ":
            fraction = cells["diverged_fraction"]
            return "diverged" + ("" if fraction is None else f" ({_share(fraction)} of tasks)")
        return "-"
    if cells["std"] is None:
        return _number(cells["mean"])
    return (
        f"{cells['mean']:.4f} ± {cells['std']:.4f} "
        f"[{cells['ci95_low']:.4f}, {cells['ci95_high']:.4f}]"
    )


def _paired_text(paired: dict[str, Any] | None) -> str:
    if paired is None:
        return ""
    if not paired["pairs"]:
        return "no shared seeds"
    if paired["difference"] is None:
        return "-"
    if paired["p_value"] is None:
        return f"{paired['difference']:+.4f} (1 pair)"
    mark = " *" if paired["significant"] else ""
    holm = f", Holm p={paired['p_value_holm']:.3g}" if paired["tests"] > 1 else ""
    needed = paired["seeds_for_80_power"]
    power = "" if needed is None else (
        f"; 80% power: >{MOST_SEEDS} seeds" if needed > MOST_SEEDS
        else f"; 80% power: {needed} seeds")  # fmt: skip
    return (f"{paired['difference']:+.4f} (p={paired['p_value']:.3g}{holm}, "
            f"{paired['pairs']} pairs){mark}{power}")  # fmt: skip


def _headers(board: Leaderboard) -> list[str]:
    level = f"{CONFIDENCE:.0%}"
    heads = ["#", "method", "config", "n (seeds)"]
    heads += [f"{_short(c)}: mean ± std [{level} CI]" for c in board.columns]
    if board.shows_episode_ci:
        heads.append(f"{_short(board.metric)}: episode CI95 (mean over runs)")
    if board.baseline is not None:
        adjusted = ", Holm-adjusted" if _paired_tests(board) > 1 else ""
        heads.append(f"Δ {_short(board.metric)} vs {_baseline_name(board)} "
                     f"(paired t{adjusted})")  # fmt: skip
    return [*heads, "train time (s)", "params"]


def _line(cells: dict[str, Any], board: Leaderboard) -> list[str]:
    rank = str(cells["rank"]) if cells["rank"] is not None else (
        "ref" if cells["reference"] else "-"
    )  # fmt: skip
    if cells["tied_with_best"]:
        rank += " ≈1"
    line = [
        rank,
        cells["method"] + (" *" if cells["other_version"] else ""),
        cells["config"],
        "" if cells["reference"] else str(cells["n"]),
    ]
    line += [stat_text(cells["stats"][c], cells["status"]) for c in board.columns]
    if board.shows_episode_ci:
        line.append(_number(cells["stats"][board.metric]["episode_ci95"]))
    if board.baseline is not None:
        line.append(_paired_text(cells["versus_baseline"]))
    time_s, params = cells["train_time_s"], cells["num_params"]
    return [*line, "" if time_s is None else f"{time_s:.1f}", "" if params is None else str(params)]


def _baseline_name(board: Leaderboard) -> str:
    base = board.baseline
    return f"{base.method}@{base.runs[0].config_hash[:8]}" if base is not None else ""


def _seed_list(seeds: list[int]) -> str:
    if seeds and seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def caption(board: Leaderboard) -> str:
    level = f"{CONFIDENCE:.0%}"
    parts = [
        f"ranked by {_short(board.metric)}: {board.metric_words}",
        f"n = seeds; std over seeds (ddof 1); [{level} CI] of the mean over seeds (Student t, "
        "n-1 dof); one seed shows no spread",
    ]
    if board.shows_episode_ci:
        parts.append("episode CI95 = the runs' own 95% CI over their test episodes, averaged")
    if any(row.tied_with_best for row in board.rows):
        parts.append(f"≈1 = not significantly worse than rank 1 (two-sided paired t-test over "
                     f"shared seeds, Holm-adjusted over the rows, {1 - CONFIDENCE:.0%})")
    if board.baseline is not None:
        base = board.baseline
        seeds = sorted(base.by_seed(board.metric))
        lonely = sum(1 for row in board.ours if row is not base and row.versus_baseline
                     and not row.versus_baseline.n)  # fmt: skip
        parts.append(
            f"Δ = row - {_baseline_name(board)} (seeds {_seed_list(seeds)}; choose another "
            f"row with --baseline METHOD@CONFIG), paired over shared seeds; * = significant "
            f"at {level} (two-sided paired t-test"
            + (f", p adjusted by Holm over the board's {_paired_tests(board)} tests"
               if _paired_tests(board) > 1 else "")  # fmt: skip
            + "); 80% power: the seeds a paired test would need to detect the observed "
            "difference (its mean and spread taken as the truth)"
            + (f"; {lonely} row(s) share no seed with it" if lonely else "")
        )
    skipped = ", ".join(f"{n} {s.lower()}" for s, n in board.excluded.items() if n)
    if skipped:
        parts.append(f"not ranked: {skipped}")
    if board.unranked:
        parts.append(f"{len(board.unranked)} row(s) listed unranked (diverged or missing)")
    if board.elsewhere:
        keys = sorted({k for row in board.elsewhere for k in row.other_setting if k != "kind"})
        hint = f" (--param {keys[0]}=VALUE ranks another)" if keys else ""
        parts.append(f"{len(board.elsewhere)} row(s) of other task or protocol settings, or "
                     f"evaluations, listed apart and not ranked with the above{hint}")  # fmt: skip
    if board.duplicates_dropped:
        parts.append(
            f"{board.duplicates_dropped} repeated run(s) of one (config, seed, code) dropped "
            "(the latest counts)"
        )
    if any(board.flagged(r) for r in board.rows):
        parts.append(f"* runs from another suite version than {board.version}")
    if any(r.is_reference for r in board.all_rows()):
        parts.append(f"ref = reference (published or derived), table {REFERENCE_VERSION}")
    apart: dict[str, list[str]] = {}
    for row in board.apart:
        differ = ", ".join(f"{k}={o} vs {t}" for k, (o, t) in row.settings_differ.items())
        apart.setdefault(differ, []).append(row.method)
    for differ, methods in apart.items():
        parts.append(f"listed apart, settings differ: {differ} (references {', '.join(methods)})")
    return "; ".join(parts)


def as_rich(board: Leaderboard) -> Table:
    table = Table(title=f"{board.benchmark}", caption=caption(board))
    for i, name in enumerate(_headers(board)):
        table.add_column(name, justify="left" if i in (1, 2) else "right")
    for cells in row_cells(board):
        style = "dim italic" if cells["reference"] else None
        table.add_row(*_line(cells, board), style=style)
    return table


def as_markdown(board: Leaderboard) -> str:
    header = _headers(board)
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


_CSV_STATS = ("n", "mean", "std", "ci95_low", "ci95_high", "episode_ci95", "diverged_fraction")


def csv_records(board: Leaderboard) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of ``board`` as CSV cells: one line per row, every
    statistic in its own named column (empty = none)."""
    stats_header = [f"{_short(c)}_{s}" for c in board.columns for s in _CSV_STATS]
    paired = ["vs_baseline_difference", "vs_baseline_p_value", "vs_baseline_p_value_holm",
              "vs_baseline_pairs", "vs_baseline_seeds_for_80_power"]
    header = ["benchmark", "rank", "status", "method", "config", "n_seeds", *stats_header,
              *(paired if board.baseline is not None else []), "train_time_s", "num_params",
              "reference_kind"]  # fmt: skip

    def text(value: Any) -> str:
        return "" if value is None else repr(value) if isinstance(value, float) else str(value)

    rows = []
    for cells in row_cells(board):
        stats = [text(cells["stats"][m][s]) for m in board.columns for s in _CSV_STATS]
        extra = []
        if board.baseline is not None:
            p = cells["versus_baseline"] or {}
            extra = [text(p.get(k)) for k in ("difference", "p_value", "p_value_holm", "pairs",
                                              "seeds_for_80_power")]
        rows.append([board.benchmark, text(cells["rank"]), cells["status"], cells["method"],
                     cells["config"], str(cells["n"]), *stats, *extra,
                     text(cells["train_time_s"]), text(cells["num_params"]),
                     cells["reference"]["kind"] if cells["reference"] else ""])  # fmt: skip
    return header, rows


def as_csv(boards: Leaderboard | Sequence[Leaderboard]) -> str:
    """One CSV table: a header, then every board's rows. Boards of several benchmarks share
    the union of their columns (in order of first appearance); a column a benchmark lacks is
    empty in its rows, so ``pandas.read_csv`` reads the whole file as one frame."""
    boards = [boards] if isinstance(boards, Leaderboard) else list(boards)
    parts = [csv_records(board) for board in boards]
    header: list[str] = []
    for names, _ in parts:
        header += [name for name in names if name not in header]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for names, rows in parts:
        where = {name: i for i, name in enumerate(names)}
        for row in rows:
            writer.writerow([row[where[name]] if name in where else "" for name in header])
    return buffer.getvalue()


def as_json_data(board: Leaderboard) -> dict[str, Any]:
    return {
        "schema": JSON_SCHEMA,
        "benchmark": board.benchmark,
        "metric": board.metric,
        "metric_words": board.metric_words,
        "higher_is_better": board.higher,
        "confidence": CONFIDENCE,
        "columns": board.columns,
        "excluded": board.excluded,
        "duplicates_dropped": board.duplicates_dropped,
        "baseline": None if board.baseline is None else board.baseline.method,
        "suite_version": board.version,
        "reference_table": REFERENCE_VERSION,
        "rows": row_cells(board),
    }


def strict_json(value: Any) -> Any:
    """``value`` with NaN and infinities as None, so that the text is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def as_json(boards: list[Leaderboard]) -> str:
    """The boards as strict JSON: indented, but each row on one line. A 10,000-row board is
    ~15 MB; indenting it whole goes through Python's encoder (``indent`` turns the C one
    off), ~10x slower than encoding each row in C."""
    parts = []
    for board in boards:
        data = as_json_data(board)
        rows = data.pop("rows")
        head = json.dumps(strict_json(data), indent=2, allow_nan=False)
        lines = ",\n".join("    " + _strict_line(row) for row in rows)
        # "rows" last: the head's closing brace replaced by the rows' list.
        parts.append(head[:-2] + ',\n  "rows": [' + (f"\n{lines}\n  " if rows else "") + "]\n}")
    return "[\n" + ",\n".join(_indented(p) for p in parts) + "\n]" if parts else "[]"


def _strict_line(value: Any) -> str:
    """``value`` as one line of strict JSON (NaN and infinities as null): encoded in C, and
    walked in Python only where it holds a non-finite number."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(strict_json(value), allow_nan=False)


def _indented(text: str) -> str:
    return "  " + text.replace("\n", "\n  ")


def as_html_table(board: Leaderboard) -> str:
    """An HTML ``<table>`` in a box that scrolls sideways when the table is wider than the
    page (no page around it): used by the report and ``--format html``."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in _headers(board))
    body = []
    for cells in row_cells(board):
        css = ' class="reference"' if cells["reference"] else ""
        tds = "".join(f"<td>{html.escape(str(c))}</td>" for c in _line(cells, board))
        body.append(f'<tr{css} data-status="{html.escape(cells["status"])}">{tds}</tr>')
    return (
        f'<div class="board"><table class="leaderboard" '
        f'data-benchmark="{html.escape(board.benchmark)}">'
        f"<caption>{html.escape(caption(board))}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def render(boards: list[Leaderboard], fmt: str) -> str:
    """All boards in one text of format ``fmt`` (not ``table``, which prints rich tables)."""
    if fmt == "markdown":
        return "\n".join(as_markdown(b) for b in boards)
    if fmt == "csv":
        return as_csv(boards)
    if fmt == "json":
        return as_json(boards) + "\n"
    if fmt == "html":
        return standalone_page("mesabench leaderboard", [as_html_table(b) for b in boards])
    if fmt == "latex":
        from benchmarks.results.latex import as_latex

        return "\n".join(as_latex(b) for b in boards)
    raise ValueError(f"format must be one of {', '.join(FORMATS)} (got {fmt!r})")


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; font-size: 16px;
       line-height: 1.4; }
div.board { max-width: 100%; overflow-x: auto; }
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
  // Wider than the window: something (a table column, a figure) would be cut off.
  const page = document.documentElement;
  document.body.dataset.pageOverflow = String(page.scrollWidth - page.clientWidth);
});
"""


def standalone_page(title: str, sections: list[str]) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f"<script>{_CHECK}</script></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p>mesabench {__version__}, generated {stamp}; reference table "
        f"{REFERENCE_VERSION}.</p>" + "\n".join(sections) + "</body></html>\n"
    )
