"""Growth guards (pytest -m slow): what a board, a sweep's planning and a table's judging
cost at N and at 4N, as a ratio measured in one process.

Linear work gives 4x, quadratic 16x; above 6x fails. A ratio of the calling thread's CPU
seconds, not of wall times nor of the process' CPU: what other processes take of the cores
does not count, nor do this process' other threads (torch's OpenMP workers spinning after the
template run's training, MLflow's), the suspect when the planted walk read 2.7x on a loaded
machine. The work timed is single-threaded. Each size's time is the least of its repeats,
the sizes interleaved. The stores are copies of one real
run made inside SQLite (bench/synthetic_store.py): 3,000 and 12,000 runs, ten seeds per
configuration, so a board has 300 and 1,200 rows. A planted loop that walks every run for
each printed row (what made the 100k-run board take 77 s) must fail the guard;
bench/leaderboard_speed.py gives the absolute figures at 100k runs.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import ROOT, stored_runs

#: One worker: the stores are built once per module, not once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("growth")]

#: Above this ratio between 4N and N the work grows faster than linearly.
LIMIT = 6.0
SMALL = 3_000


def _synthetic_store_module():
    spec = importlib.util.spec_from_file_location(
        "synthetic_store", ROOT / "bench" / "synthetic_store.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def growth(work: Callable[[int], object], small: int, repeats: int = 3) -> float:
    """Least thread CPU seconds of ``work(4 * small)`` over those of ``work(small)``."""
    work(small)  # imports and caches, paid once outside the timing
    least = {small: float("inf"), 4 * small: float("inf")}
    for _ in range(repeats):
        for size in least:
            began = time.thread_time()
            work(size)
            least[size] = min(least[size], time.thread_time() - began)
    return least[4 * small] / least[small]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, str]:
    """A store holding one real FINISHED fomaml run (two iterations) and its run id."""
    from benchmarks.cli.main import main

    folder = tmp_path_factory.mktemp("growth")
    uri = f"sqlite:///{folder / 'template.db'}"
    code = main(["run", "--method", "fomaml", "--set", "iterations=2", "--set", "val_every=1",
                 "--set", "val_tasks=2", "--set", "test_tasks=4",
                 "--tracking-uri", uri])  # fmt: skip
    assert code == 0
    (run,) = stored_runs(uri)
    return folder / "template.db", run.info.run_id


@pytest.fixture(scope="module")
def board_stores(template, tmp_path_factory) -> dict[int, str]:
    """Stores of SMALL and 4 * SMALL copies of the template run, by size: ten seeds of
    each configuration."""
    replicate = _synthetic_store_module().replicate
    db, run_id = template
    folder = tmp_path_factory.mktemp("boards")
    uris = {}
    for size in (SMALL, 4 * SMALL):
        copy = folder / f"{size}.db"
        with sqlite3.connect(db) as source, sqlite3.connect(copy) as target:
            source.backup(target)  # with what the write-ahead log holds, unlike a file copy
        assert replicate(copy, [run_id], size) == size + 1
        uris[size] = f"sqlite:///{copy}"
    return uris


def _board(uris: dict[int, str]) -> Callable[[int], str]:
    from benchmarks.results.formats import render
    from benchmarks.results.leaderboards import leaderboard_from_store
    from benchmarks.store.reader import open_reader

    def work(size: int) -> str:
        board = leaderboard_from_store(open_reader(uris[size]), "sinusoid-5shot")
        assert len(board.rows) == size // 10
        return render([board], "csv") + render([board], "json")

    return work


def test_a_board_grows_linearly_in_its_runs(board_stores):
    ratio = growth(_board(board_stores), SMALL)
    assert ratio < LIMIT, f"the board took {ratio:.1f}x as long at 4x the runs"


def test_the_board_guard_fails_a_planted_per_row_walk_over_every_run(board_stores, monkeypatch):
    """The guard itself: a config label that looks at every run of the board for each row
    (the shape of the 100k-run board's 77 s) is caught."""
    from benchmarks.results.board import Leaderboard

    honest = Leaderboard.config_label

    def walks_every_run(self, row):
        mine = [run for other in self.ours for run in other.runs if other.method == row.method]
        codes = {run.code for run in mine}
        return honest(self, row) + ("" if len(codes) < 2 else "!")

    monkeypatch.setattr(Leaderboard, "config_label", walks_every_run)
    ratio = growth(_board(board_stores), SMALL)
    assert ratio > LIMIT, f"a per-row walk over every run grew only {ratio:.1f}x"


def test_a_sweeps_planning_grows_linearly_in_its_cells():
    from benchmarks.sweeps.spec import SweepSpec, plan_cells

    def work(size: int) -> None:
        spec = SweepSpec(benchmark="sinusoid-5shot", methods=("maml", "fomaml"),
                         seeds=tuple(range(size // 2)),
                         grid=(("inner_lr", ("0.01", "0.02")),))  # fmt: skip
        assert len(plan_cells(spec)) == 2 * size

    ratio = growth(work, SMALL, repeats=5)
    assert ratio < LIMIT, f"planning took {ratio:.1f}x as long at 4x the cells"


def test_a_tables_judging_grows_linearly_in_its_runs(template, board_stores):
    """A two-line table (one line held to the other) judged from the N and 4N runs of its
    configurations (a line may read several: its hashes over presets and versions)."""
    from benchmarks.published.claims import Claim, Table
    from benchmarks.published.reproduce import judged
    from benchmarks.store.reader import open_reader

    with sqlite3.connect(template[0]) as connection:
        (config,), = connection.execute(
            "SELECT value FROM tags WHERE key = 'mesabench.config_hash'"
        ).fetchall()  # fmt: skip
    line = Claim("loss", "sinusoid-5shot", "fomaml", "final/test_loss", target=10.0,
                 check="at_most", provenance="derived")  # fmt: skip
    held = Claim("loss again", "sinusoid-5shot", "fomaml", "final/test_loss", versus="loss",
                 check="at_most", tolerance=0.5, provenance="derived")  # fmt: skip
    table = Table("growth", "growth guard", "none", (line, held))

    def work(size: int) -> None:
        hashes = {config, *(f"{config}-{k}" for k in range(1, size // 10))}
        outcome = judged(table, "quick", range(10), open_reader(board_stores[size]),
                         {"loss": hashes, "loss again": hashes})  # fmt: skip
        assert all(len(runs) == 10 for runs in outcome.runs.values())
        assert {line.verdict for line in outcome.lines} <= {"reproduced", "not reproduced"}

    ratio = growth(work, SMALL)
    assert ratio < LIMIT, f"judging took {ratio:.1f}x as long at 4x the runs"
