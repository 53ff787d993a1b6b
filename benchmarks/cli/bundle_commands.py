"""The commands that carry runs between stores: ``export`` (chosen runs to a bundle) and
``import`` (a bundle's runs into a store). The format: :mod:`benchmarks.store.bundles`."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from benchmarks.planning.config import ConfigError


def add_commands(sub) -> None:
    export = sub.add_parser(
        "export", help="write chosen runs (by benchmark, method, run id, or all) to a bundle"
    )
    export.add_argument("output", help="the bundle to write (e.g. runs.mesabundle)")
    export.add_argument("--benchmark", action="append", default=[],
                        help="runs of this benchmark (repeatable; default: every one)")  # fmt: skip
    export.add_argument("--method", action="append", default=[],
                        help="runs of this method (repeatable; default: every one)")  # fmt: skip
    export.add_argument("--run-id", action="append", default=[], metavar="RUN_ID",
                        help="this run (repeatable; not with --benchmark, --method)")  # fmt: skip
    export.add_argument("--histories", action="store_true",
                        help="also each metric's history (default: its last value)")  # fmt: skip
    export.add_argument("--tracking-uri", default=None)
    imp = sub.add_parser("import", help="add a bundle's runs to a store (each run once)")
    imp.add_argument("bundle", help="the bundle to read")
    imp.add_argument("--tracking-uri", default=None)
    verify = sub.add_parser(
        "verify", help="re-run sampled cells of an imported bundle here and record the verdict"
    )
    verify.add_argument("bundle", help="a bundle already imported into the store")
    verify.add_argument("--cells", type=int, required=True, help="how many cells to re-run")
    verify.add_argument("--seed", type=int, default=0, help="draws the cells (default 0)")
    verify.add_argument("--data-root", default=None, help="folder with real datasets")
    verify.add_argument("--tracking-uri", default=None)


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    from benchmarks.store.bundles import bundle_bytes, run_body, write_bundle
    from benchmarks.store.client import open_for_reading
    from benchmarks.store.reader import open_reader
    from mesabench_core import __version__

    if args.run_id and (args.benchmark or args.method):
        raise ConfigError("export: --run-id takes no --benchmark or --method")
    output = Path(args.output)
    if not output.parent.is_dir():
        raise ConfigError(f"export: cannot write {output}: no folder {output.parent}")
    client = open_for_reading(args.tracking_uri)
    reader = open_reader(args.tracking_uri, client)
    runs = _chosen(client, reader, args.benchmark, args.method, args.run_id)
    if not runs:
        raise ConfigError(f"export: no finished, failed or killed runs chosen in {reader.uri}")
    with tempfile.TemporaryDirectory() as scratch:
        data = bundle_bytes([run_body(client, run, args.histories, Path(scratch))
                             for run in runs], __version__)  # fmt: skip
    write_bundle(output, data)
    console.print(f"exported {len(runs)} run(s) to {output} ({len(data) / 1024:.1f} KiB)")
    return 0


def cmd_import(args: argparse.Namespace, console: Console) -> int:
    from benchmarks.store.bundles import check_installed, import_bundle, read_bundle
    from benchmarks.store.tracking import MlflowTracker

    bundle = read_bundle(Path(args.bundle))
    check_installed(bundle)
    tracker = MlflowTracker(args.tracking_uri)  # a store that cannot be written: refused
    done = import_bundle(tracker, bundle)
    console.print(f"imported {len(done.added)} run(s) from {bundle.source} into {tracker.uri}"
                  f"; {len(done.present)} already there", soft_wrap=True)  # fmt: skip
    return 0


def cmd_verify(args: argparse.Namespace, console: Console) -> int:
    """Exit 0 when every re-run cell agrees with its claimed numbers, 1 on a mismatch."""
    import torch

    from benchmarks.catalog.installed import benchmark_spec
    from benchmarks.results.verify import (
        Verdict,
        compare,
        imported_copy,
        rerun,
        same_platform,
        sample_cells,
    )
    from benchmarks.store.bundles import VERIFIED_TAG, check_installed, read_bundle
    from benchmarks.store.tracking import MlflowTracker, machine_text

    bundle = read_bundle(Path(args.bundle))
    check_installed(bundle)
    chosen = sample_cells(bundle, args.cells, args.seed)
    tracker = MlflowTracker(args.tracking_uri)
    copies = {  # all found before anything runs
        run["source_run"]: imported_copy(
            tracker.client, tracker.experiment_id(run["benchmark"], create=False),
            run["source_run"])
        for run in chosen
    }  # fmt: skip
    mismatches = 0
    for run in chosen:
        final, device = rerun(run, args.data_root)
        where = f"{machine_text(device)}, torch {torch.__version__}, {device}"
        exact = same_platform(run, machine_text(device), torch.__version__)
        outcome, differ = compare(run["metrics"], final, exact,
                                  benchmark_spec(run["benchmark"]).verify_rtol)  # fmt: skip
        verdict = Verdict(run["source_run"], copies[run["source_run"]], outcome, differ)
        tracker.client.set_tag(verdict.run_id, VERIFIED_TAG, verdict.text(where))
        mismatches += outcome == "MISMATCH"
        tags = run["tags"]
        console.print(f"{tags.get('mesabench.method')} seed {tags.get('mesabench.seed')} "
                      f"(run {verdict.run_id}): {verdict.text(where)}", soft_wrap=True)  # fmt: skip
    console.print(f"verified {len(chosen)} cell(s) of {bundle.source}: "
                  f"{len(chosen) - mismatches} agree, {mismatches} mismatch")  # fmt: skip
    return 1 if mismatches else 0


def _chosen(client, reader, benchmarks: Sequence[str], methods: Sequence[str],
            run_ids: Sequence[str]) -> list:  # fmt: skip
    """The runs to export: by run id, else the closed runs (finished, failed, killed) of
    the chosen benchmarks (every one in the store where none is named) and methods."""
    from benchmarks.results.leaderboards import benchmarks_in_store
    from benchmarks.store.bundles import CARRIED_STATUSES

    if run_ids:
        runs = []
        for run_id in run_ids:
            try:
                run = client.get_run(run_id)
            except Exception:
                raise ConfigError(f"export: no run {run_id!r} in {reader.uri}") from None
            closed = run.info.status in CARRIED_STATUSES
            if not closed or "mesabench.method" not in run.data.tags:
                raise ConfigError(f"export: run {run_id} is {run.info.status} or no run of "
                                  "a method (a sweep's parent?): only closed runs travel")
            runs.append(run)
        return runs
    closed = []
    for name in benchmarks or benchmarks_in_store(reader):
        experiment = reader.experiment_id(name)
        if experiment is None:
            raise ConfigError(f"export: no runs of benchmark {name!r} in {reader.uri}")
        token = None
        while True:
            page = client.search_runs([experiment], max_results=5000, page_token=token)
            closed += [r for r in page if r.info.status in CARRIED_STATUSES
                       and "mesabench.method" in r.data.tags]  # fmt: skip
            token = page.token
            if not token:
                break
    held = {r.data.tags["mesabench.method"] for r in closed}
    missing = [m for m in methods if m not in held]
    if missing:  # a misspelt name would otherwise be left out in silence
        there = ", ".join(sorted(held)) or "none"
        raise ConfigError(f"export: no closed runs of method {missing[0]!r} in the chosen "
                          f"benchmarks (they hold: {there})")
    return [r for r in closed if not methods or r.data.tags["mesabench.method"] in methods]
