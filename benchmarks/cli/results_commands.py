"""The commands that read results back: leaderboard, report, ui, compare and runs.

They never write to the store, except ``runs --mark-failed``, which closes lost runs; they
share the filters of :class:`~benchmarks.results.board.RunFilter` and the formats of
:mod:`benchmarks.results.formats`.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.planning.config import parse_pairs
from benchmarks.results.board import GROUP_KEYS, RunFilter
from benchmarks.running.console import print_table
from benchmarks.store.bulk import cycles_collected_after
from mesabench_core import BadInput


class ResultsUsageError(BadInput):
    """Bad input to a results command (reported like every usage error: exit 2)."""


def add_commands(sub) -> None:
    """Register the results commands on the CLI's subparsers."""
    from benchmarks.results.formats import FORMATS

    board = sub.add_parser("leaderboard", help="rank finished runs: mean +- std over seeds")
    _selection(board)
    board.add_argument("--metric", default=None, help="metric to rank by (default: primary)")
    board.add_argument(
        "--group-by",
        default="method,config_hash",
        help=f"comma list of {', '.join(GROUP_KEYS)} or run params (e.g. method.inner_lr)",
    )
    board.add_argument("--format", default="table", choices=FORMATS)
    board.add_argument("--output", default=None, help="write to this file instead of stdout")
    board.add_argument(
        "--columns",
        action="append",
        default=[],
        metavar="PREFIX",
        help="also show final metrics starting with PREFIX (e.g. final/sparsity/); "
        "repeat it or give a comma list",
    )
    board.add_argument("--no-references", action="store_true", help="hide published rows")
    board.add_argument(
        "--shipped", action="store_true",
        help="first import the suite's shipped runs of the board's benchmark(s) (shipped_runs/, "
        "each run once, marked imported): rank a new method beside them without re-running "
        "them",
    )  # fmt: skip
    board.add_argument(
        "--refuse-flagged",
        action="store_true",
        help="list rows the protocol linter flags apart instead of ranking them",
    )
    board.add_argument(
        "--baseline",
        default=None,
        metavar="METHOD[@CONFIG]",
        help="add each row's difference to a row of METHOD (the one sharing most seeds with "
        "the others; @CONFIG: the row whose config hash starts so), paired over shared seeds",
    )

    board.add_argument(
        "--aggregate", default=None, metavar="B1,B2,...",
        help="one board across these benchmarks: scores normalised by each benchmark's "
        "anchors, IQM and mean with stratified-bootstrap 95%% CIs, the probability of "
        "improvement of each method over each other (formats: table, markdown, json)",
    )  # fmt: skip

    report = sub.add_parser("report", help="write a static HTML report (tables and figures)")
    _selection(report)
    report.add_argument("--output", required=True, help="folder for index.html")
    report.add_argument(
        "--aggregate", default=None, metavar="B1,B2,...",
        help="add the aggregate across these benchmarks (tables and its figure)",
    )
    report.add_argument(
        "--tables", default=None, metavar="NAMES",
        help="published tables to include with their figures: a comma list or 'all' "
        "(default with --all: every table with runs in the store; otherwise none)",
    )  # fmt: skip

    ui = sub.add_parser("ui", help="start the MLflow UI on 127.0.0.1 against the store")
    ui.add_argument("--tracking-uri", default=None)
    ui.add_argument("--port", type=int, default=5000)
    ui.add_argument("--workers", type=int, default=1, help="server worker processes (default 1)")

    compare = sub.add_parser("compare", help="config and metric differences of two runs")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--tracking-uri", default=None)
    compare.add_argument("--all", action="store_true", help="show equal settings too")

    runs = sub.add_parser("runs", help="list unfinished runs; find and close lost (stale) ones")
    which = runs.add_mutually_exclusive_group()
    which.add_argument("--benchmark", default=None, help="one benchmark (default: all)")
    runs.add_argument("--tracking-uri", default=None)
    runs.add_argument("--stale", action="store_true", help="only runs without a heartbeat")
    runs.add_argument(
        "--mark-failed",
        action="store_true",
        help="close the stale runs as FAILED ('lost: no heartbeat since T')",
    )


def _import_shipped(args) -> None:
    """``--shipped``: the shipped runs of the chosen benchmark (of every one, with --all)
    into the store, before it is read. The benchmark, the run filter and the metric are
    checked first: a typo there writes nothing."""
    from benchmarks.catalog.installed import benchmark_spec
    from benchmarks.results.leaderboards import ranking_direction
    from benchmarks.store.shipped import import_shipped, shipped_bundles, shipped_folder
    from benchmarks.store.tracking import MlflowTracker

    _filter(args)
    if args.metric is not None:
        ranking_direction(args.metric)  # a metric that cannot rank: refused, nothing imported
    wanted = None if args.all else {benchmark_spec(_benchmark(args)).name}
    bundles = shipped_bundles()
    if not bundles:
        raise ResultsUsageError(f"--shipped: no bundles in {shipped_folder()}")
    tracker = MlflowTracker(args.tracking_uri)
    added = import_shipped(tracker, bundles, wanted)
    # On stderr: a CSV or JSON board on stdout stays clean.
    sys.stderr.write(f"shipped runs: {added} imported from {shipped_folder()}\n")


def _benchmark(args) -> str:
    """The one benchmark a results command shows (without --all)."""
    return args.benchmark or "sinusoid-5shot"


def _selection(parser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--benchmark", default=None, help="one benchmark (default sinusoid-5shot)")
    which.add_argument("--all", action="store_true", help="every benchmark in the store")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--since", default=None, metavar="YYYY-MM-DD", help="runs started then")
    parser.add_argument("--version", default=None, help="only runs of this suite version")


def _filter(args) -> RunFilter:
    since = None
    if args.since is not None:
        try:
            since = datetime.strptime(args.since, "%Y-%m-%d").replace(tzinfo=timezone.utc)
        except ValueError:
            raise ResultsUsageError(f"--since must be YYYY-MM-DD (got {args.since!r})") from None
    return RunFilter(
        tags=parse_pairs(args.tag, "--tag"),
        params=parse_pairs(args.param, "--param"),
        since=since,
        version=args.version,
    )


def _boards(args, reader, **options):
    from benchmarks.results.leaderboards import benchmarks_in_store, leaderboard_from_store

    if args.all:
        names = benchmarks_in_store(reader)
    else:
        names = [_benchmark(args)]
        if reader.experiment_id(names[0]) is None:  # no runs: is it a benchmark at all?
            from benchmarks.catalog.installed import benchmark_spec

            benchmark_spec(names[0])  # an unknown name is a usage error with suggestions
    run_filter = _filter(args)
    boards = [leaderboard_from_store(reader, n, run_filter=run_filter, **options) for n in names]
    # A filter that matches no run is a mistake to say, not an empty board (with --all:
    # when it matches no run anywhere).
    unmatched = [b.filtered_out for b in boards if b.filtered_out]
    if unmatched and len(unmatched) == len(boards):
        raise ResultsUsageError(unmatched[0])
    return boards


def _writable(output: str, kind: str) -> Path:
    """Where ``--output`` may write a ``kind`` (``file`` or ``folder``): refused in one line
    before anything is read when its folder does not exist or the path is the other kind."""
    path = Path(output)
    folder = path if kind == "folder" else path.parent
    if kind == "file" and path.is_dir():
        raise ResultsUsageError(f"--output {output} is a folder; name a file in it")
    if kind == "folder" and path.exists() and not path.is_dir():
        raise ResultsUsageError(f"--output {output} is a file; the report needs a folder")
    parent = folder if kind == "file" else folder.parent
    if not parent.is_dir():
        raise ResultsUsageError(f"--output {output}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ResultsUsageError(f"--output {output}: folder {parent} is not writable")
    return path


def _aggregate_names(args) -> list[str]:
    """The benchmarks ``--aggregate`` names (two or more, each installed)."""
    from benchmarks.catalog.installed import benchmark_spec

    if args.benchmark is not None or args.all:
        raise ResultsUsageError("--aggregate names its benchmarks; leave out --benchmark / --all")
    names = list(dict.fromkeys(n.strip() for n in args.aggregate.split(",") if n.strip()))
    if len(names) < 2:
        raise ResultsUsageError("--aggregate needs two or more benchmarks, a comma list")
    for name in names:
        benchmark_spec(name)  # an unknown name is a usage error with suggestions
    return names


def _aggregate(args, reader):
    from benchmarks.results.aggregate import aggregate_from_store

    result, anchors = aggregate_from_store(reader, _aggregate_names(args), _filter(args))
    if not result.methods:
        raise ResultsUsageError(
            f"--aggregate: no method has finished runs on all of {args.aggregate}")
    return result, anchors


def cmd_aggregate(args, console: Console) -> int:
    import json

    from benchmarks.results import aggregate as agg
    from benchmarks.store.reader import open_reader

    if args.format not in ("table", "markdown", "json", "latex"):
        raise ResultsUsageError(
            f"--format {args.format} with --aggregate: allowed table, markdown, json, latex")
    # Options of a one-benchmark board that an aggregate would silently ignore.
    ignored = [flag for flag, given in (
        ("--metric", args.metric is not None), ("--baseline", args.baseline is not None),
        ("--columns", bool(args.columns)), ("--refuse-flagged", args.refuse_flagged),
        ("--no-references", args.no_references),
        ("--group-by", args.group_by != "method,config_hash"),
    ) if given]  # fmt: skip
    if ignored:
        raise ResultsUsageError(f"--aggregate takes no {ignored[0]} (each benchmark's anchors "
                                "name its metric; one configuration per method)")  # fmt: skip
    output = None if args.output is None else _writable(args.output, "file")
    result, anchors = _aggregate(args, open_reader(args.tracking_uri))
    if args.format == "table" and output is None:
        for title, (headers, rows) in (("aggregate", agg.summary_rows(result)),
                                       ("probability of improvement",
                                        agg.improvement_rows(result))):  # fmt: skip
            table = Table(title=f"{title} over {', '.join(result.benchmarks)}")
            for header in headers:
                table.add_column(header)
            for row in rows:
                table.add_row(*row)
            print_table(console, table, heading_columns=1)
        for line in agg.notes(result, anchors):
            console.print(line, highlight=False)
        return 0
    if args.format == "json":
        from benchmarks.results.formats import strict_json

        text = json.dumps(strict_json(agg.as_json_data(result, anchors)), indent=2) + "\n"
    elif args.format == "latex":
        from benchmarks.results.latex import aggregate_as_latex

        text = aggregate_as_latex(result, anchors)
    else:
        text = agg.as_markdown(result, anchors)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        console.print(f"wrote {args.output}")
    return 0


def cmd_leaderboard(args, console: Console) -> int:
    if args.aggregate is not None:
        return cmd_aggregate(args, console)
    group_by = tuple(k.strip() for k in args.group_by.split(",") if k.strip())
    if not group_by:
        raise ResultsUsageError("--group-by needs at least one key")
    output = None if args.output is None else _writable(args.output, "file")
    prefixes = tuple(p.strip() for given in args.columns for p in given.split(",") if p.strip())
    if args.shipped:
        _import_shipped(args)
    with cycles_collected_after():
        return _show_leaderboard(args, console, output, group_by, prefixes)


def _show_leaderboard(args, console: Console, output: Path | None, group_by: tuple[str, ...],
                      prefixes: tuple[str, ...]) -> int:  # fmt: skip
    from benchmarks.results.formats import as_rich, render
    from benchmarks.store.reader import open_reader

    boards = _boards(
        args,
        open_reader(args.tracking_uri),
        metric=args.metric,
        group_by=group_by,
        extra_prefixes=prefixes,
        references=not args.no_references,
        baseline=args.baseline,
    )
    shown = {column for board in boards for column in board.columns}
    for prefix in prefixes:  # a prefix no column takes was a typo, not an empty request
        if not any(column.startswith(prefix) for column in shown):
            recorded = sorted({m for b in boards for r in b.all_rows() for run in r.runs
                               for m in run.metrics if not m.endswith("_ci95")})  # fmt: skip
            raise ResultsUsageError(
                f"--columns {prefix}: no final metric of the board starts with it (recorded: "
                f"{', '.join(recorded[:12])}{', ...' if len(recorded) > 12 else ''})"
            )
    from benchmarks.results.linter import finding_lines, refuse_flagged

    for board in boards:
        # The protocol linter: one line per finding on stderr (a CSV or JSON on stdout stays
        # clean); with --refuse-flagged the rows leave the ranking too.
        for line in finding_lines(board):
            sys.stderr.write(line + "\n")
        if args.refuse_flagged:
            refuse_flagged(board)
    if args.format == "table" and args.output is None:
        for board in boards:
            print_table(console, as_rich(board), heading_columns=2)
        return 0
    if args.format == "table":
        text = "\n".join(_plain(as_rich(b)) for b in boards)
    else:
        text = render(boards, args.format)
    if args.output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        console.print(f"wrote {args.output}")
    return 0


def _plain(table: Table) -> str:
    console = Console(width=200, file=io.StringIO())
    print_table(console, table)
    return console.file.getvalue()


def cmd_report(args, console: Console) -> int:
    from benchmarks.results.report import write_report
    from benchmarks.store.client import open_for_reading
    from benchmarks.store.reader import open_reader

    output = _writable(args.output, "folder")
    tables = _report_tables(args)
    client = open_for_reading(args.tracking_uri)  # a read-only store is read as it is
    reader = open_reader(args.tracking_uri, client)
    aggregated = None
    if args.aggregate is not None:
        from benchmarks.results.leaderboards import leaderboard_from_store

        aggregated = _aggregate(args, reader)  # then each benchmark's own board
        boards = [leaderboard_from_store(reader, name, run_filter=_filter(args))
                  for name in aggregated[0].benchmarks]  # fmt: skip
    else:
        boards = _boards(args, reader)
    extra = []
    if aggregated is not None:
        from benchmarks.results.report import aggregate_section

        extra.append(aggregate_section(*aggregated, output))
    if tables:
        from benchmarks.published.report_sections import table_sections

        extra += table_sections(client, reader, tables, output)
    path = write_report(client, boards, output, extra)
    published = len(extra) - (aggregated is not None)
    also = ", an aggregate" if aggregated else ""
    console.print(f"report: {path.resolve()} ({len(boards)} benchmark(s), {published} "
                  f"published table(s){also})")  # fmt: skip
    return 0


def _report_tables(args) -> list:
    """The tables ``--tables`` names (checked before the store is opened)."""
    from benchmarks.published.tables import TABLES, table_named

    if args.tables is None:
        return list(TABLES.values()) if args.all else []
    names = [n.strip() for n in args.tables.split(",") if n.strip()]
    if not names:
        raise ResultsUsageError("--tables needs a table name, a comma list of them, or 'all'")
    if names == ["all"]:
        return list(TABLES.values())
    return [table_named(name) for name in names]


def ui_command(uri: str, port: int, workers: int = 1) -> list[str]:
    # One worker by default: a personal UI needs no pool (MLflow's default of 4 workers
    # means about 11 processes and 2 GB).
    return [
        sys.executable, "-m", "mlflow", "ui",
        "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers),
    ]  # fmt: skip


def cmd_ui(args, console: Console) -> int:
    from benchmarks.store.tracking import MlflowTracker

    tracker = MlflowTracker(args.tracking_uri)  # creates the store folder if needed
    # No job runner: it serves MLflow 3's GenAI jobs only, and starts seven more processes
    # (about 1.1 GB) beside the UI.
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # fmt: skip
    # MLflow 3's UI opens on its GenAI view unless told which workflow the runs belong to.
    url = f"http://127.0.0.1:{args.port}/#/experiments?workflowType=machine_learning"
    console.print(f"starting the MLflow UI on port {args.port} (store {tracker.uri}) ...")
    process = subprocess.Popen(ui_command(tracker.uri, args.port, args.workers), env=env)
    try:
        # The address is given once the server answers (MLflow takes tens of seconds to
        # start): a link printed before that leads to "connection refused".
        if _wait_until_serving(process, args.port):
            # MLflow 3 loses the workflow choice when a run is opened from a list: its run
            # pages then show the GenAI views ("Evaluations"); one switch brings them back.
            console.print(f"MLflow UI at {url}; Ctrl-C stops", soft_wrap=True)
            console.print("(a run page showing GenAI views such as Evaluations: choose "
                          "'Model training' at the top left)")  # fmt: skip
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait()
        return 0


def _wait_until_serving(process: subprocess.Popen, port: int, timeout_s: float = 300) -> bool:
    """Whether the server on ``port`` answered before ``process`` ended (or the time ran
    out: then the address is not announced, and MLflow's own errors say why)."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return True
        except OSError:
            time.sleep(0.5)
    return False


def cmd_compare(args, console: Console) -> int:
    from benchmarks.store.reader import open_reader

    reader = open_reader(args.tracking_uri)
    runs = []
    for run_id in (args.run_a, args.run_b):
        run = reader.run(run_id)
        if run is None:
            raise ResultsUsageError(f"no run {run_id!r} in {reader.uri}")
        runs.append(run)
    a, b = runs
    for run in runs:
        console.print(f"{run.run_id}: {_status_text(run)}")
    print_table(console, _difference_table("settings", a.params, b.params, args.all, a, b))
    print_table(console, _difference_table("final metrics", a.metrics, b.metrics, True, a,
                                             b))
    return 0


def _difference_table(title, left: dict, right: dict, show_equal: bool, a, b) -> Table:
    table = Table(title=title)
    table.add_column("key")
    table.add_column(f"{a.name} ({a.run_id[:8]})", justify="right")
    table.add_column(f"{b.name} ({b.run_id[:8]})", justify="right")
    table.add_column("difference", justify="right")
    for key in sorted(set(left) | set(right)):
        x, y = left.get(key, "-"), right.get(key, "-")
        if x == y and not show_equal:
            continue
        if isinstance(x, float) and isinstance(y, float):
            table.add_row(key, f"{x:.4f}", f"{y:.4f}", f"{y - x:+.4f}")
        else:
            table.add_row(key, str(x), str(y), "" if x == y else "differs")
    return table


def _status_text(run) -> str:
    """A run's status, with ``stale`` for a RUNNING run whose heartbeat stopped."""
    from benchmarks.store.lifecycle import is_stale, lost_reason

    if is_stale(run.status, run.tags, run.start_ms):
        return f"RUNNING, stale ({lost_reason(run.tags, run.start_ms)})"
    error = run.tags.get("error")
    return run.status + (f" ({error.splitlines()[0][:120]})" if error else "")


def cmd_runs(args, console: Console) -> int:
    import time

    from benchmarks.results.leaderboards import benchmarks_in_store
    from benchmarks.store.client import open_for_reading, open_store
    from benchmarks.store.lifecycle import (
        is_stale,
        last_heartbeat,
        lost_reason,
        mark_lost,
        process_alive,
    )
    from benchmarks.store.reader import (
        default_tracking_uri,
        normalise_uri,
        open_reader,
        sqlite_path,
    )
    from benchmarks.store.unsaved import kept_for, restore

    if args.mark_failed and not args.stale:
        raise ResultsUsageError("--mark-failed needs --stale (it closes only lost runs)")
    uri = normalise_uri(args.tracking_uri or default_tracking_uri())
    db = sqlite_path(uri)
    if db is not None and not db.exists():  # nothing recorded: nothing to list or close
        console.print(f"no store at {uri}: no runs recorded there", soft_wrap=True)
        return 0
    # Listing only reads (a read-only store included); --mark-failed writes.
    client = (open_store if args.mark_failed else open_for_reading)(uri)
    # Metrics a disk-full end kept aside: written back (and their runs closed) first.
    for kept in kept_for(uri):
        if args.mark_failed:
            said = restore(client, kept)
            if said is not None:  # None: another command took the file meanwhile
                console.print(said, soft_wrap=True)
        else:
            console.print(f"run {kept.run_id} left metrics the store could not take in "
                          f"{kept.path} (--stale --mark-failed writes them back)",
                          soft_wrap=True)  # fmt: skip
    reader = open_reader(uri, client)
    names = [args.benchmark] if args.benchmark else benchmarks_in_store(reader)
    if args.benchmark and reader.experiment_id(args.benchmark) is None:
        from benchmarks.catalog.installed import benchmark_spec

        benchmark_spec(args.benchmark)  # an unknown name: one line, with suggestions
    table = Table(title="stale runs" if args.stale else "unfinished runs")
    for column in ("benchmark", "run", "name", "status", "last heartbeat"):
        # Run ids are copied into other commands: never wrapped.
        table.add_column(column, no_wrap=column == "run", min_width=32 if column == "run" else None)
    found = closed = 0
    now = time.time()
    for name in names:
        experiment = reader.experiment_id(name)
        if experiment is None:
            continue
        for run in client.search_runs(
            [experiment], filter_string="attributes.status = 'RUNNING'", max_results=5000
        ):
            tags = dict(run.data.tags)
            stale = is_stale("RUNNING", tags, run.info.start_time, now)
            if args.stale and not stale:
                continue
            found += 1
            beat = last_heartbeat(tags)
            age = "never" if beat is None else f"{now - beat:.0f} s ago"
            status = "stale" if stale else "running"
            if stale and process_alive(tags):  # silent, but its process is here: paused
                status = "stale, but its process is alive (paused?): not closed"
            elif stale and args.mark_failed:
                mark_lost(client, run.info.run_id, lost_reason(tags, run.info.start_time))
                status, closed = "marked FAILED", closed + 1
            table.add_row(name, run.info.run_id, run.info.run_name or "", status, age)
    print_table(console, table)
    what = "stale" if args.stale else "unfinished"
    tail = f"; {closed} marked FAILED" if args.mark_failed else ""
    console.print(f"{found} {what} run(s){tail}")
    return 0
