"""A leaderboard as a LaTeX table for a paper (``leaderboard --format latex``).

booktabs rules; one row per ranked configuration of ours (references, unranked rows and
rows of other settings are left to the other formats); per metric the mean over seeds
± the half-width of its Student-t 95% CI, and n per row. The best row by the ranked metric
and every row not significantly worse than it (two-sided paired t-test over the seeds both
have, at 95%) are bold; a row that shares fewer than two seeds with the best cannot be
tested and is not bold. The caption names every statistic. The document needs
``\\usepackage{booktabs}``.
"""

from __future__ import annotations

from benchmarks.results.board import Leaderboard, LeaderboardRow
from benchmarks.results.statistics import CONFIDENCE, paired_t_test

#: LaTeX's special characters in text, escaped.
_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
            "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
            "^": r"\textasciicircum{}"}  # fmt: skip


def escape(text: str) -> str:
    return "".join(_SPECIAL.get(c, c) for c in text)


def _short(metric: str) -> str:
    return metric.removeprefix("final/")


def tied_with_best(board: Leaderboard) -> set[int]:
    """Indices (in ``board.rows`` order, ours only) of the best row and of those not
    significantly worse than it under the paired test."""
    ours = [row for row in board.rows if not row.is_reference]
    if not ours:
        return set()
    best = ours[0]  # the board ranks its rows by the metric, best first
    best_seeds = best.by_seed(board.metric)
    tied = {0}
    for index, row in enumerate(ours[1:], start=1):
        mine = row.by_seed(board.metric)
        shared = sorted(set(mine) & set(best_seeds))
        test = paired_t_test([mine[s] for s in shared], [best_seeds[s] for s in shared])
        if test.p_value is not None and not test.significant:
            tied.add(index)
    return tied


def _cell(row: LeaderboardRow, metric: str, bold: bool) -> str:
    stats = row.stats(metric)
    if stats.mean is None:
        return "diverged" if stats.n else "--"
    text = f"{stats.mean:.4f}"
    if stats.ci95 is not None:
        text += f" $\\pm$ {stats.ci95:.4f}"
    return f"\\textbf{{{text}}}" if bold else text


def caption_text(board: Leaderboard) -> str:
    level = escape(f"{CONFIDENCE:.0%}")
    direction = "higher" if board.higher else "lower"
    return (
        f"{escape(board.benchmark)}: mean over seeds $\\pm$ the half-width of its {level} "
        f"confidence interval (Student $t$, $n-1$ degrees of freedom); $n$ = seeds (one seed "
        f"shows no interval). Ranked by {escape(_short(board.metric))} ({direction} is "
        f"better). Bold: the best row and every row not significantly worse than it (paired "
        f"two-sided $t$-test over shared seeds at {level}); rows sharing fewer than two seeds "
        "with the best are not tested."
    )


def as_latex(board: Leaderboard) -> str:
    ours = [row for row in board.rows if not row.is_reference]
    tied = tied_with_best(board)
    label = escape(board.benchmark).replace("\\_", "-")
    head = ["method", "config", "$n$", *(escape(_short(c)) for c in board.columns)]
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        f"\\caption{{{caption_text(board)}}}",
        f"\\label{{tab:{label}}}",
        "\\begin{tabular}{ll" + "r" * (1 + len(board.columns)) + "}",
        "\\toprule",
        " & ".join(head) + " \\\\",
        "\\midrule",
    ]
    for index, row in enumerate(ours):
        cells = [escape(row.method), escape(board.config_label(row)), str(len(row.seeds))]
        cells += [_cell(row, c, index in tied and c == board.metric) for c in board.columns]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(lines)


def aggregate_as_latex(result, anchors_text) -> str:
    """An aggregate across benchmarks (``leaderboard --aggregate ... --format latex``):
    per method its runs per benchmark, IQM and mean with their stratified-bootstrap 95%
    intervals. Bold: the best IQM and every method whose probability of being improved on
    by the best has an interval reaching 0.5 (the aggregate's own comparison; no paired
    t-test spans benchmarks)."""
    from benchmarks.results.aggregate import notes, summary_rows

    headers, rows = summary_rows(result)
    order = [row[0] for row in rows]  # best IQM first
    tied = {order[0]} | {m for m in order[1:] if result.improvement[order[0], m].low <= 0.5}
    caption = (
        f"Aggregate over {escape(', '.join(result.benchmarks))}. "
        + " ".join(escape(line) for line in notes(result, anchors_text))
        + " Bold: the best IQM and every method not significantly below it (the interval of"
        " the probability that the best improves on it reaches 0.5)."
    )
    lines = ["\\begin{table}[t]", "\\centering", f"\\caption{{{caption}}}",
             "\\label{tab:aggregate}", "\\begin{tabular}{llrr}", "\\toprule",
             " & ".join(escape(h) for h in headers) + " \\\\", "\\midrule"]  # fmt: skip
    for method, runs, iqm, mean in rows:
        iqm = escape(iqm)
        lines.append(" & ".join([escape(method), escape(runs),
                                 f"\\textbf{{{iqm}}}" if method in tied else iqm,
                                 escape(mean)]) + " \\\\")  # fmt: skip
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(lines)
