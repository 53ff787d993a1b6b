"""The suite's own runs, shipped with it: the runs behind docs/RESULTS.md, one bundle per
published table in the repository's ``shipped_runs/`` folder (``shipped_runs/<table>.mesabundle``).

``reproduce TABLE`` imports the table's shipped bundle into the store before it runs
anything, so only the cells missing from both are run (a table too large for one sitting is
assembled over several, each adding its bundle's runs); ``leaderboard --shipped`` imports
the shipped runs of the boards it shows, so that a new method ranks beside the suite's
baselines, paired by seed, without running them again. ``reproduce TABLE --ship`` writes the
table's judged runs back to its bundle. Imports are ``import``'s: each run once, marked
imported on every board (docs/bundles.md).

``MESABENCH_SHIPPED_RUNS`` names another folder (a lab's own set of reference runs).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from benchmarks.store.bundles import SUFFIX, Bundle, check_installed, import_bundle, read_bundle

#: The tag naming a run's configuration (its identity without the seed).
CONFIG_TAG = "mesabench.config_hash"
#: The tag naming a run's seed: with the configuration, its cell.
SEED_TAG = "mesabench.seed"

FOLDER_ENV = "MESABENCH_SHIPPED_RUNS"


def shipped_folder() -> Path:
    """Where the shipped bundles are: ``MESABENCH_SHIPPED_RUNS``, else the checkout's
    ``shipped_runs/`` (beside the ``benchmarks`` package)."""
    chosen = os.environ.get(FOLDER_ENV)
    return Path(chosen) if chosen else Path(__file__).resolve().parents[2] / "shipped_runs"


def table_bundle(table: str) -> Path:
    """The shipped bundle of one published table (which may not exist yet)."""
    return shipped_folder() / f"{table}{SUFFIX}"


def shipped_bundles() -> list[Path]:
    folder = shipped_folder()
    return sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []


def import_shipped(tracker, paths: Iterable[Path], benchmarks: set[str] | None = None,
                   say: Callable[[str], None] | None = None) -> int:  # fmt: skip
    """Import the runs of ``paths`` (only those of ``benchmarks``, when given) into
    ``tracker``'s store, each once; returns how many were added. A bundle that names a
    method or benchmark not installed here is refused whole, in one line, before anything
    is written."""
    added = 0
    for path in paths:
        bundle = read_bundle(path)
        if benchmarks is not None:
            bundle = Bundle([r for r in bundle.runs if r["benchmark"] in benchmarks],
                            bundle.digest, bundle.source)  # fmt: skip
        if not bundle.runs:
            continue
        check_installed(bundle)
        done = import_bundle(tracker, bundle)
        added += len(done.added)
        if say:
            say(f"shipped runs ({path.name}): {len(done.added)} added, "
                f"{len(done.present)} already in the store")  # fmt: skip
    return added


def _cell(run: dict) -> tuple[str | None, str | None]:
    """A bundle run's cell: its configuration and seed."""
    return run["tags"].get(CONFIG_TAG), run["tags"].get(SEED_TAG)


def ship_table(outcome, tracker, histories: Collection[str] = (),
               configurations: Collection[str] | None = None,
               others: Mapping[str, Collection[str]] | None = None) -> str:  # fmt: skip
    """Write the runs a judged table read (``outcome``: :func:`reproduce`'s) to the table's
    shipped bundle, beside the runs it held already: runs of other presets or seeds stay,
    and a run imported from the bundle is kept as the bundle had it (never shipped again as
    a new run). A cell (configuration and seed) the bundle held a run of and the table
    judged another run of (a cell run again here, ``--no-shipped``) keeps the judged run
    only: one run per cell. Final metrics, and the ``histories`` named (those the table's
    figure draws: short, one point per validation or log step); no checkpoints.

    ``configurations``: the config hashes the table's lines run at any preset; a run the
    bundle held of none of them (a line since changed or removed) is dropped, so that the
    bundle holds the runs behind the table and no others. None: nothing is dropped.

    ``others``: the histories each other table's figure draws, by table name. A cell this
    table ships is often a line of other tables too (the same baseline at the same
    settings); each of their bundles that holds that cell gets this table's run in place of
    its own, with the histories its table draws, so that one cell has one run whichever table
    reads it (two runs of a cell differ at least in float noise, and a board of several
    bundles would otherwise keep one of them by chance). Their sections of the results page
    then change with it. Returns a one-line summary."""
    import tempfile

    from benchmarks.store.bundles import SOURCE_RUN_TAG, bundle_bytes, run_body, write_bundle
    from mesabench_core import __version__

    path = table_bundle(outcome.table.name)
    held = read_bundle(path).runs if path.exists() else []
    wanted = None if configurations is None else set(configurations)
    kept = {r["source_run"]: r for r in held
            if wanted is None or r["tags"].get(CONFIG_TAG) in wanted}  # fmt: skip
    before, dropped, replaced = len(kept), len(held) - len(kept), 0
    by_cell: dict[tuple, list[str]] = {}  # the held runs of each cell, by source run
    for source, held_run in kept.items():
        by_cell.setdefault(_cell(held_run), []).append(source)
    ids = sorted({run_id for by_seed in outcome.runs.values() for run_id, _ in by_seed.values()})
    # Each judged cell's body in this bundle, and its MLflow run where it was made here
    # (None: imported), for the other bundles. The runs the bundle held already are shared
    # too, so that shipping again mends other bundles a ship cut short left behind.
    shared: dict[tuple, tuple[dict, object]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for run_id in ids:
            run = tracker.client.get_run(run_id)
            source = run_id if run_id in kept else run.data.tags.get(SOURCE_RUN_TAG)
            if source in kept:  # the shipped run itself, made or imported here
                shared[_cell(kept[source])] = kept[source], run if source == run_id else None
                continue
            body = run_body(tracker.client, run, set(histories), scratch=Path(scratch))
            for source in by_cell.pop(_cell(body), []):
                del kept[source]  # the cell's earlier run, which the table no longer read
                replaced += 1
            kept[body["source_run"]] = body
            shared[_cell(body)] = body, run
        if not kept:  # no line has a finished run (the data was missing, say)
            return (f"nothing: {outcome.table.name} has no finished run to ship ({path} "
                    "untouched)")  # fmt: skip
        data = bundle_bytes(kept.values(), __version__)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bundle(path, data)
        also = _share_cells(shared, tracker.client, others or {}, outcome.table.name,
                            Path(scratch))  # fmt: skip
    gone = f", {dropped} dropped (of configurations no line runs now)" if dropped else ""
    gone += f", {replaced} replaced (cells run again)" if replaced else ""
    gone += f"; the same run put in {also}" if also else ""
    return (f"{path} ({len(kept)} run(s), {len(kept) - before + replaced} new{gone}; "
            f"{len(data) / 1024:.1f} KiB)")


def _share_cells(shared: dict[tuple, tuple[dict, object]], client,
                 others: Mapping[str, Collection[str]], table: str, scratch: Path) -> str:
    """Put the runs of ``shared`` (by cell: the body this table's bundle holds, and its
    MLflow run where it was made in this store) into every other table's bundle that holds
    a different run of the same cell (:func:`ship_table`'s ``others``); returns which
    bundles changed and how many runs, '' if none."""
    from benchmarks.store.bundles import bundle_bytes, checksum, run_body, write_bundle
    from mesabench_core import __version__

    changed = []
    for name, drawn in sorted(others.items()):
        path = table_bundle(name)
        if name == table or not shared or not path.exists():
            continue
        runs = read_bundle(path).runs
        swapped = 0
        for index, held in enumerate(runs):
            body, run = shared.get(_cell(held), (None, None))
            if body is None or held["source_run"] == body["source_run"]:
                continue
            if run is not None:  # made here: every history the other table draws
                runs[index] = run_body(client, run, set(drawn), scratch=scratch)
            else:  # imported: the histories this bundle carries of those it draws
                copy = {k: v for k, v in body.items() if k not in ("histories", "checksum")}
                kept = {k: v for k, v in body.get("histories", {}).items() if k in drawn}
                runs[index] = {**copy, **({"histories": kept} if kept else {})}
                runs[index]["checksum"] = checksum(runs[index])
            swapped += 1
        if swapped:
            write_bundle(path, bundle_bytes(runs, __version__))
            changed.append(f"{name} ({swapped})")
    return ", ".join(changed)
