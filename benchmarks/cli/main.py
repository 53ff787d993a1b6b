"""The command line: run, list, show, sweep, reproduce, and the results commands
(leaderboard, report, ui, compare).

Exit codes: 0 done; 1 the run failed (recorded as FAILED); 2 bad input (nothing written);
3 not run: with --exclusive, the cell is FINISHED (by another process); 130 interrupted
(Ctrl-C, SIGTERM, SIGHUP or a closed output pipe; recorded as KILLED, resumable).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.cli import bundle_commands, page_commands, results_commands
from benchmarks.planning.config import parse_pairs
from benchmarks.running.console import answered, prepare_process, print_table
from mesabench_core import BadInput

EXIT_OK, EXIT_FAILED = 0, 1

log = logging.getLogger("mesabench")


class UsageError(BadInput):
    """Bad command-line input."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        raise UsageError(message + self._allowed(message))

    def _allowed(self, message: str) -> str:
        """What a missing argument may be, and where help is: "required: what" alone leaves
        a newcomer guessing."""
        if "arguments are required" not in message:
            return ""
        missing = message.rsplit(":", 1)[1].replace(" ", "").split(",")
        hints = []
        for action in self._actions:
            if action.dest in missing and action.choices:
                hints.append(f"{action.dest}: one of {', '.join(action.choices)}")
        hints.append(f"see {self.prog} --help")
        return " (" + "; ".join(hints) + ")"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run a method on a benchmark and record it in MLflow")
    run.add_argument("--method", help="method name (see 'list methods')")
    run.add_argument("--benchmark", default=None, help="benchmark name (default sinusoid-5shot)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a method, task or protocol setting (repeatable)",
    )
    run.add_argument("--preset", default=None, help="a named override set of the benchmark")
    run.add_argument("--tracking-uri", default=None, help="MLflow tracking URI")
    run.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    run.add_argument("--precision", choices=("fp32", "bf16"), default=None,
                     help="bf16: forward passes under autocast (the setting 'precision')")
    run.add_argument("--compile", choices=("off", "inductor", "eager"), default=None,
                     help="torch.compile the method's step (the setting 'compile')")
    run.add_argument("--resume", metavar="RUN_ID", help="continue a killed run")
    run.add_argument(
        "--data-root", default=None, help="folder with real datasets (else $MESABENCH_DATA)"
    )
    run.add_argument("--parent", default=None, metavar="RUN_ID", help="a sweep's parent run")
    # A tune cell's role (JSON), set by ``tune`` only: not a user's setting.
    run.add_argument("--tuning", default=None, help=argparse.SUPPRESS)
    run.add_argument(
        "--system-metrics",
        action="store_true",
        help="also log CPU, memory (and GPU) use every 10 s (MLflow's system/*)",
    )
    run.add_argument(
        "--exclusive",
        action="store_true",
        help="claim the cell (config, seed) first: wait while another process runs it, exit 3 "
        "if it is FINISHED, take it over if its holder died; sweeps run every cell this way",
    )

    ev = sub.add_parser(
        "evaluate", help="score a finished run's saved learner, here or on another benchmark"
    )
    ev.add_argument("run_id", help="the training run whose learner to score")
    ev.add_argument("--benchmark", default=None, help="where to score it (default: its own)")
    ev.add_argument("--learner", choices=["best", "final"], default=None,
                    help="which saved learner (default: best where saved, else final)")  # fmt: skip
    ev.add_argument("--seed", type=int, default=None, help="default: the run's seed")
    ev.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--device", default="auto")
    ev.add_argument("--data-root", default=None, help="folder with real datasets")
    ev.add_argument("--tracking-uri", default=None)

    lst = sub.add_parser("list", help="list methods, benchmarks or gradient modulations")
    lst.add_argument("what", choices=["methods", "benchmarks", "modulations"])

    show = sub.add_parser(
        "show", help="print a benchmark's resolved spec, or a method's config on a benchmark"
    )
    show.add_argument("name", help="a benchmark, or a method (shown on --benchmark)")
    show.add_argument("--method", help="also print this method's resolved config")
    show.add_argument("--benchmark", help="with a method's name: the benchmark (default "
                      "sinusoid-5shot)")  # fmt: skip
    show.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    results_commands.add_commands(sub)
    bundle_commands.add_commands(sub)
    page_commands.add_commands(sub)

    sweep = sub.add_parser("sweep", help="run methods x grid x seeds; resumable, local or Ray")
    sweep.add_argument("file", nargs="?", default=None, help="a YAML sweep file")
    sweep.add_argument("--benchmark", default=None)
    sweep.add_argument("--methods", default=None, help="comma list of methods")
    sweep.add_argument("--seeds", default="0", help="e.g. 0-4 or 0,2,5 (default 0)")
    sweep.add_argument(
        "--grid", action="append", default=[], metavar="KEY=V1,V2", help="repeatable"
    )
    sweep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    sweep.add_argument("--preset", default=None)
    sweep.add_argument("--device", default="cpu")
    sweep.add_argument("--workers", type=int, default=1, help="parallel cells (local backend)")
    sweep.add_argument(
        "--warm",
        action="store_true",
        help="fork every cell from a process that imported everything once (one per Ray "
        "worker); saves ~5 s per cell, each cell still its own process",
    )
    sweep.add_argument("--backend", choices=["local", "ray"], default="local")
    sweep.add_argument("--address", default=None, help="Ray cluster address (or 'auto')")
    sweep.add_argument("--tracking-uri", default=None)
    sweep.add_argument(
        "--data-root", default=None, help="folder with real datasets, given to every cell"
    )

    tune = sub.add_parser(
        "tune", help="every method the same number of trials, selected on validation, then "
        "run over the final seeds",
    )  # fmt: skip
    tune.add_argument("--benchmark", required=True)
    tune.add_argument("--methods", required=True, help="comma list of methods")
    tune.add_argument("--trials", type=int, required=True, help="trials per method")
    tune.add_argument("--seeds", default="0-2", help="the selected configuration's seeds "
                      "(default 0-2)")  # fmt: skip
    tune.add_argument("--tune-seeds", default="100", help="the trials' seeds, apart from "
                      "--seeds (default 100)")  # fmt: skip
    tune.add_argument("--select", default=None, metavar="METRIC",
                      help="validation metric to select on (default val/accuracy, or "
                      "val/loss for regression)")  # fmt: skip
    tune.add_argument("--set", dest="overrides", action="append", default=[],
                      metavar="KEY=VALUE",
                      help="fixed for every run (and out of the search)")  # fmt: skip
    tune.add_argument("--preset", default=None)
    tune.add_argument("--device", default="cpu")
    tune.add_argument("--workers", type=int, default=1, help="parallel cells")
    tune.add_argument("--warm", action="store_true", help="fork cells from a warm process")
    tune.add_argument("--sampler-seed", type=int, default=0, help="the TPE sampler's seed")
    tune.add_argument("--tracking-uri", default=None)
    tune.add_argument("--data-root", default=None, help="folder with real datasets")

    rep = sub.add_parser(
        "reproduce", help="run a published table's sweeps and judge it line by line"
    )
    rep.add_argument("table", nargs="?", default=None, help="a table (see --list)")
    rep.add_argument("--list", action="store_true", help="list the tables and their costs")
    rep.add_argument("--preset", default="quick", help="quick, cpu or paper (default quick)")
    rep.add_argument("--seeds", default=None, help="default: the table's own")
    rep.add_argument("--workers", type=int, default=1, help="parallel cells")
    rep.add_argument("--warm", action="store_true", help="fork cells from a warm launcher")
    rep.add_argument("--no-run", action="store_true",
                     help="only judge what the store holds (missing lines: not run)")  # fmt: skip
    rep.add_argument("--lines", default=None,
                     help="run only the lines whose label contains this (and what they are "
                     "held to); every line is still judged from the store")  # fmt: skip
    rep.add_argument("--markdown", action="store_true", help="print the RESULTS.md table")
    rep.add_argument("--figure", default=None, metavar="FOLDER",
                     help="draw the table's figure from the store into FOLDER (PNG and CSV)")
    rep.add_argument("--no-shipped", action="store_true",
                     help="judge from this store's runs alone (default: the table's shipped "
                     "runs, shipped_runs/TABLE.mesabundle, are imported first; only missing "
                     "cells run)")
    rep.add_argument("--ship", action="store_true",
                     help="then write the table's judged runs to its shipped bundle")
    rep.add_argument("--tracking-uri", default=None)
    rep.add_argument("--data-root", default=None, help="folder with real datasets")
    return parser


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    return parse_pairs(items, "--set")


def _report_plugin_errors(console: Console) -> None:
    # From the catalog, not the run service: listing imports neither MLflow nor the runner.
    from benchmarks.catalog.installed import report_plugin_errors

    report_plugin_errors()


# -- commands ---------------------------------------------------------------------------
def cmd_list(args, console: Console) -> int:
    from benchmarks.catalog.installed import load_plugins, plugins_disabled
    from benchmarks.catalog.specs import BENCHMARKS
    from methods.gradient.modulation import MODULATIONS
    from methods.registry import METHODS

    load_plugins()
    registry = {"methods": METHODS, "benchmarks": BENCHMARKS, "modulations": MODULATIONS}
    table = Table(title=args.what)
    table.add_column("name", style="bold")
    table.add_column("protocol")
    table.add_column("source")
    table.add_column("description")
    for entry in registry[args.what]:
        if args.what == "methods":
            protocol = ", ".join(sorted(getattr(entry.value.cls, "protocols", ())))
        elif args.what == "benchmarks":
            protocol = entry.value.protocol_name
        else:  # a modulation serves every gradient-based family
            protocol = "any"
        table.add_row(entry.name, protocol, entry.source, entry.description)
    print_table(console, table)
    if plugins_disabled():
        console.print("plugins disabled (MESABENCH_DISABLE_PLUGINS)")
    _report_plugin_errors(console)
    return EXIT_OK


def cmd_show(args, console: Console) -> int:
    import dataclasses
    import difflib
    import json

    from benchmarks.catalog.installed import benchmark_spec, load_plugins
    from benchmarks.catalog.specs import BENCHMARKS
    from benchmarks.planning.config import ConfigError, apply_overrides, as_dict, route
    from benchmarks.planning.plan import DEFAULT_BENCHMARK, plan_run
    from methods.registry import METHODS

    load_plugins()
    benchmark, method = args.name, args.method
    if benchmark not in BENCHMARKS.entries and benchmark not in METHODS.entries:
        close = difflib.get_close_matches(benchmark, [*BENCHMARKS.entries, *METHODS.entries],
                                          n=3, cutoff=0.6)  # fmt: skip
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise ConfigError(f"show: {benchmark!r} is neither a benchmark nor a method{hint} "
                          "(see python -m benchmarks list benchmarks / list methods)")  # fmt: skip
    if benchmark not in BENCHMARKS.entries and benchmark in METHODS.entries:
        benchmark, method = args.benchmark or DEFAULT_BENCHMARK, args.name
    elif args.benchmark is not None:
        raise ConfigError("--benchmark goes with a method's name: show METHOD --benchmark B")
    spec = benchmark_spec(benchmark)
    overrides = parse_overrides(args.overrides)
    body = json.loads(spec.describe())
    if method is None:
        sections = apply_overrides(spec.sections(), overrides)
        changed = route(spec.sections(), overrides)
        set_by = {f"{part}.{key}": "--set" if key in changed[part] else f"benchmark {benchmark}"
                  for part, config in sections.items() for key in as_dict(config)}  # fmt: skip
    else:
        plan = plan_run(method, benchmark, 0, overrides, device="cpu")
        sections, set_by = plan.sections(), dict(plan.set_by)
        body["method"] = {"name": plan.method_name, **as_dict(plan.method)}
    body["task"], body["protocol"] = as_dict(sections["task"]), as_dict(sections["protocol"])
    if hasattr(sections["task"], "derived"):  # e.g. a stream's angles, drawn from its seed
        body["derived"] = sections["task"].derived()
    # Which layer decided each setting (benchmarks/planning/resolve.py lists them in order).
    body["set_by"] = set_by
    # What each setting means, as its declaration says (param(help=...)).
    body["help"] = {f"{part}.{f.name}": f.metadata["help"]
                    for part, config in sections.items() if dataclasses.is_dataclass(config)
                    for f in dataclasses.fields(config) if f.metadata.get("help")}  # fmt: skip
    if console.is_terminal:  # coloured for a reader
        console.print_json(json.dumps(body, default=str))
    else:  # the same text (rich's indent, unwrapped), without rich's highlighting pass
        console.file.write(json.dumps(body, default=str, indent=2, ensure_ascii=False) + "\n")
    return EXIT_OK


def cmd_run(args, console: Console) -> int:
    from benchmarks.running.service import RunRequest, run_command

    settings = parse_overrides(args.overrides)
    for name in ("precision", "compile"):  # shortcuts for --set NAME=VALUE
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    request = RunRequest(
        method=args.method, benchmark=args.benchmark, seed=args.seed,
        settings=settings, preset=args.preset, device=args.device,
        tracking_uri=args.tracking_uri, data_root=args.data_root, parent=args.parent,
        exclusive=args.exclusive, system_metrics=args.system_metrics, resume=args.resume,
        tuning=args.tuning,
    )  # fmt: skip
    return run_command(request, console)


def cmd_evaluate(args, console: Console) -> int:
    """Score a finished run's saved learner on its benchmark or another compatible one; the
    new run records which run it came from."""
    from benchmarks.running.service import EvaluationRequest, evaluate_command

    request = EvaluationRequest(
        run_id=args.run_id, benchmark=args.benchmark, learner=args.learner, seed=args.seed,
        settings=parse_overrides(args.overrides), device=args.device,
        tracking_uri=args.tracking_uri, data_root=args.data_root,
    )  # fmt: skip
    return evaluate_command(request, console)


def cmd_sweep(args, console: Console) -> int:
    from pathlib import Path

    from benchmarks.store.tracking import MlflowTracker
    from benchmarks.sweeps.spec import plan_cells, spec_from_args, spec_from_file
    from benchmarks.sweeps.sweep import run_sweep, summary_line

    if args.file is not None:
        if args.benchmark or args.methods or args.grid or args.overrides:
            raise UsageError("a sweep file takes no --benchmark, --methods, --grid or --set")
        spec = spec_from_file(Path(args.file), args.data_root)
    else:
        if not args.benchmark or not args.methods:
            raise UsageError("sweep needs a sweep file, or --benchmark and --methods")
        spec = spec_from_args(
            args.benchmark, args.methods, args.seeds, args.grid, args.overrides,
            args.preset, args.device, args.data_root,
        )  # fmt: skip
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1 (got {args.workers})")
    _report_plugin_errors(console)
    plan_cells(spec)  # every cell validated before the store is even opened
    tracker = MlflowTracker(args.tracking_uri)
    result = run_sweep(
        spec, tracker, args.backend, args.workers, args.address, progress=console.print,
        warm=args.warm,
    )  # fmt: skip
    console.print(f"sweep {spec.sweep_id()}: {summary_line(result)}")
    return result.exit_code


def cmd_tune(args, console: Console) -> int:
    from benchmarks.store.tracking import MlflowTracker
    from benchmarks.sweeps.spec import parse_seeds
    from benchmarks.sweeps.tune import TuneSpec, run_tune
    from mesabench_datasets.data_root import explicit_root

    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1 (got {args.workers})")
    methods = tuple(dict.fromkeys(m.strip() for m in args.methods.split(",") if m.strip()))
    if not methods:
        raise UsageError("--methods needs at least one method name")
    spec = TuneSpec(
        benchmark=args.benchmark, methods=methods, trials=args.trials,
        seeds=parse_seeds(args.seeds), tune_seeds=parse_seeds(args.tune_seeds),
        settings=tuple(parse_pairs(args.overrides, "--set").items()), preset=args.preset,
        device=args.device, data_root=explicit_root(args.data_root), select=args.select,
        sampler_seed=args.sampler_seed,
    )  # fmt: skip
    _report_plugin_errors(console)
    result = run_tune(spec, MlflowTracker(args.tracking_uri), args.workers,
                      progress=console.print, warm=args.warm)  # fmt: skip
    for line in result.failed:
        console.print(f"FAILED {line}")
    if not result.interrupted:
        console.print(f"tuned {', '.join(methods)} on {spec.benchmark}: {spec.trials} trials "
                      f"each, selected on {result.metric}; see `leaderboard --benchmark "
                      f"{spec.benchmark}`")  # fmt: skip
    return result.exit_code


def cmd_reproduce(args, console: Console) -> int:
    from benchmarks.published.reproduce import (
        HEADERS,
        catalog_rows,
        lines_to_run,
        markdown,
        reproduce,
        rows,
        table_configurations,
        verdict_counts,
        write_figure,
    )
    from benchmarks.published.tables import TABLES, check_preset, table_named
    from benchmarks.store.shipped import import_shipped, ship_table, table_bundle
    from benchmarks.store.tracking import MlflowTracker
    from benchmarks.sweeps.spec import parse_seeds

    if args.list:
        listing = Table(title="published tables (cost: wall time on a 2-core CPU, one core "
                        "per run, all seeds: the shipped runs' recorded times where a "
                        "table ships runs of the preset, else as measured when its lines "
                        "were written)")  # fmt: skip
        for header in ("table", "claim", "lines", "seeds", "quick", "cpu", "paper"):
            listing.add_column(header)
        for row in catalog_rows(list(TABLES.values())):
            listing.add_row(*row)
        print_table(console, listing)
        return EXIT_OK
    if args.table is None:
        raise UsageError("reproduce needs a table name (see 'reproduce --list')")
    table = table_named(args.table)
    check_preset(args.preset)
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1 (got {args.workers})")
    lines_to_run(table, args.lines)  # a typo refused before the store is opened
    parse_seeds(args.seeds or table.seeds)  # so is a bad --seeds (shipped runs import first)
    folder = None if args.figure is None else _figure_folder(args.figure)
    _report_plugin_errors(console)
    tracker = MlflowTracker(args.tracking_uri)
    say = (lambda line: log.info(line)) if args.markdown else console.print
    if not args.no_shipped and table_bundle(table.name).exists():
        import_shipped(tracker, [table_bundle(table.name)], say=say)
    outcome = reproduce(
        table, tracker, args.preset, args.seeds, args.workers, args.warm,
        run=not args.no_run, data_root=args.data_root, progress=say, lines=args.lines,
    )  # fmt: skip
    link = None
    if folder is not None:
        png = write_figure(outcome, tracker.client, folder)
        if png is None:
            say(f"no figure: {table.name} declares none, or none of its lines has run")
        else:
            link = _link(png)
            say(f"figure: {png} (its data: {png.with_suffix('.csv')})")
    if args.ship:
        def drawn(shown) -> set[str]:  # a published table
            return shown.figure.history_keys() if shown.figure is not None else set()

        others = {name: drawn(other) for name, other in TABLES.items() if name != table.name}
        written = ship_table(outcome, tracker, drawn(table), table_configurations(table),
                             others)  # fmt: skip
        say(f"shipped {written}")
    if args.markdown:
        sys.stdout.write(markdown(outcome, tracker.uri, args.lines, args.data_root, link))
    else:
        shown = Table(title=f"{table.title} ({table.name}, preset {args.preset})")
        for header in HEADERS:
            shown.add_column(header)
        for row in rows(outcome):
            shown.add_row(*row)
        print_table(console, shown)
        console.print(f"verdicts: {verdict_counts(outcome)}")
    if outcome.failed:
        console.print(f"{outcome.failed} cell(s) FAILED or KILLED: their lines count as not run")
    return EXIT_FAILED if outcome.failed else EXIT_OK


def _figure_folder(text: str) -> Path:
    """``--figure``'s folder: created if its parent exists; one line if it cannot be."""
    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--figure {text}: a file is there; name a folder")
    if not folder.exists() and not folder.parent.is_dir():
        raise UsageError(f"--figure {text}: folder {folder.parent} does not exist")
    if not os.access(folder if folder.exists() else folder.parent, os.W_OK):
        raise UsageError(f"--figure {text}: not writable")
    return folder


def _link(png: Path) -> str:
    """How docs/RESULTS.md links a figure: relative to docs/ where it lies under it."""
    docs = Path("docs").resolve()
    try:
        return png.resolve().relative_to(docs).as_posix()
    except ValueError:
        return str(png)


COMMANDS = {
    "run": cmd_run,
    "list": cmd_list,
    "show": cmd_show,
    "evaluate": cmd_evaluate,
    "sweep": cmd_sweep,
    "tune": cmd_tune,
    "reproduce": cmd_reproduce,
    "leaderboard": results_commands.cmd_leaderboard,
    "report": results_commands.cmd_report,
    "ui": results_commands.cmd_ui,
    "compare": results_commands.cmd_compare,
    "runs": results_commands.cmd_runs,
    "export": bundle_commands.cmd_export,
    "import": bundle_commands.cmd_import,
    "verify": bundle_commands.cmd_verify,
    "results-page": page_commands.cmd_results_page,
}


def main(argv: Sequence[str] | None = None) -> int:
    console = prepare_process()

    def command() -> int:
        parser = build_parser()
        if not (sys.argv[1:] if argv is None else argv):
            # No command at all: the newcomer's first try. Show what there is, then the
            # one-line error (exit 2) as for any missing argument.
            console.file.write(parser.format_help())
        args = parser.parse_args(argv)
        return COMMANDS[args.command](args, console)

    return answered(command)
