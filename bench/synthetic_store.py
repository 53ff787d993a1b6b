"""Synthetic MLflow stores of many runs, copied from real ones inside SQLite.

``replicate(db, template_runs, copies)`` copies each template run ``copies`` times into the
template's experiment: copy ``i`` gets seed ``i % seeds`` and configuration ``i // seeds``
(its ``mesabench.config_hash`` and one method setting changed with it; configuration 0
is the template's own), its own run id, and its final losses and accuracies scaled by up to
10%, every other tag, param and metric as the template's. The
copying is done by SQL (``INSERT ... SELECT`` over a recursive counter), not row by row in
Python: 100,000 runs of ~100 rows each take seconds, so the growth guard in the slow suite
can build its stores at N and 4N runs for each test run. Creating runs through MLflow would
take hours at that size.

    python bench/synthetic_store.py STORE.db RUNS [--seeds 10]  # copies of every run in it
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Sequence
from pathlib import Path

_COUNTER = "WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
#: The new run id of copy ``i`` of template ``t`` (32 hex-like characters, unique).
_NEW_ID = "printf('%08x%024x', ?, i)"
_RUN_COLUMNS = ("name, source_type, source_name, entry_point_name, user_id, status, "
                "start_time, end_time, source_version, lifecycle_stage, artifact_uri, "
                "experiment_id, deleted_time")  # fmt: skip


def replicate(db: Path, template_runs: Sequence[str], copies: int, seeds: int = 10,
              setting: str = "method.inner_lr") -> int:  # fmt: skip
    """Copy each run of ``template_runs`` ``copies`` times (see the module's text); returns
    the number of runs the store holds afterwards."""
    connection = sqlite3.connect(db)
    try:
        with connection:
            for number, template in enumerate(template_runs, start=1):
                _copy(connection, number, template, copies, seeds, setting)
        return connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        connection.close()


def _copy(connection, number: int, template: str, copies: int, seeds: int,
          setting: str) -> None:
    last, configs = copies - 1, seeds
    connection.execute(
        f"{_COUNTER}INSERT INTO runs (run_uuid, {_RUN_COLUMNS}) SELECT {_NEW_ID}, "
        f"{_RUN_COLUMNS.replace('start_time', 'start_time + i')} FROM runs, k "
        "WHERE run_uuid = ?",
        (last, number, template),
    )
    connection.execute(
        f"{_COUNTER}INSERT INTO tags (key, value, run_uuid) SELECT key, CASE key "
        "WHEN 'mesabench.seed' THEN CAST(i % ? AS TEXT) "
        "WHEN 'mesabench.config_hash' THEN CASE WHEN i / ? = 0 THEN value "
        "ELSE value || '-' || (i / ?) END "
        f"ELSE value END, {_NEW_ID} FROM tags, k WHERE run_uuid = ?",
        (last, seeds, configs, configs, number, template),
    )
    connection.execute(
        f"{_COUNTER}INSERT INTO params (key, value, run_uuid) SELECT key, CASE key "
        "WHEN 'seed' THEN CAST(i % ? AS TEXT) "
        "WHEN ? THEN CASE WHEN i / ? = 0 THEN value ELSE value || '.' || (i / ?) END "
        f"ELSE value END, {_NEW_ID} FROM params, k WHERE run_uuid = ?",
        (last, seeds, setting, configs, configs, number, template),
    )
    for table in ("latest_metrics", "metrics"):
        connection.execute(
            f"{_COUNTER}INSERT INTO {table} (key, value, timestamp, step, is_nan, run_uuid) "
            "SELECT key, CASE WHEN key LIKE '%loss%' OR key LIKE '%accuracy%' "
            "THEN value * (1 + 0.001 * ((i * 37) % 100)) ELSE value END, timestamp, step, is_nan, "
            f"{_NEW_ID} FROM {table}, k WHERE run_uuid = ? AND key LIKE 'final/%'",
            (last, number, template),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("runs", type=int, help="copies of each run the store holds")
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    with sqlite3.connect(args.db) as connection:
        templates = [row[0] for row in connection.execute("SELECT run_uuid FROM runs")]
    print(replicate(args.db, templates, args.runs, args.seeds))


if __name__ == "__main__":
    main()
