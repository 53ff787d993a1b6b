"""The protocol linter of a board: one line per finding, naming the row.

A row is flagged when a run of it recorded a protocol finding when it started
(``mesabench.lint``: fewer test episodes than the benchmark's minimum, a cross-domain test
on classes the training set shares), when a run of it says it selected its model on test
data (``mesabench.selected_on``), or when its runs read data files with different contents
(``mesabench.data_digest``). A reference row is flagged when it declares no settings: it
would be ranked beside runs of any setting. ``leaderboard --refuse-flagged`` lists flagged
rows apart instead of ranking them.
"""

from __future__ import annotations

import json

from benchmarks.planning.lint import DATA_DIGEST_TAG, LINT_TAG, SELECTED_ON_TAG
from benchmarks.results.board import Leaderboard, LeaderboardRow


def row_findings(row: LeaderboardRow) -> list[str]:
    """What is wrong with one row's protocol (empty: nothing). Kept on the row: its runs are
    fixed once it is built, and a board asks for each row's findings to print them and to
    write them into the row."""
    if row._findings is None:
        row._findings = _findings(row)
    return list(row._findings)


def _findings(row: LeaderboardRow) -> list[str]:
    if row.is_reference:
        if not row.reference.settings:
            return [f"reference {row.reference.source}: declares none of the settings it "
                    "was measured under"]  # fmt: skip
        return []
    findings: list[str] = []
    # Each distinct value once (a row's runs mostly share theirs), in the runs' order.
    for text in dict.fromkeys(run.tags.get(LINT_TAG, "[]") for run in row.runs):
        for finding in json.loads(text):
            if finding not in findings:
                findings.append(finding)
    for run in row.runs:
        selected = run.tags.get(SELECTED_ON_TAG, "")
        if "test" in selected.lower():
            note = f"model selected on test data ({selected}) in run {run.run_id[:8]}"
            if note not in findings:
                findings.append(note)
    digests = {run.tags[DATA_DIGEST_TAG] for run in row.runs if DATA_DIGEST_TAG in run.tags}
    if len(digests) > 1:
        findings.append(f"its runs read different data ({len(digests)} different digests of "
                        "their data files)")  # fmt: skip
    return findings


def board_findings(board: Leaderboard) -> list[tuple[LeaderboardRow, str]]:
    """Every finding on the board, by row, in the board's order."""
    return [(row, finding) for row in board.all_rows() for finding in row_findings(row)]


def finding_lines(board: Leaderboard) -> list[str]:
    """One line per finding: ``flagged: BENCHMARK METHOD (CONFIG): WHAT``."""
    return [f"flagged: {board.benchmark} {row.method} ({board.config_label(row)}): {finding}"
            for row, finding in board_findings(board)]  # fmt: skip


def refuse_flagged(board: Leaderboard) -> None:
    """Take flagged rows of ours out of the ranking (listed unranked, status ``flagged``)."""
    flagged = [row for row in board.rows if not row.is_reference and row_findings(row)]
    for row in flagged:
        board.rows.remove(row)
        row.status = "flagged"
        board.unranked.append(row)
