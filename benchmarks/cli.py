"""The command line: run, list, show, sweep, reproduce, and the results commands
(leaderboard, report, ui, compare).

Exit codes: 0 done; 1 the run failed (recorded as FAILED); 2 bad input (nothing written);
3 not run: with --exclusive, the cell is FINISHED (by another process); 130 interrupted
(Ctrl-C, SIGTERM, SIGHUP or a closed output pipe; recorded as KILLED, resumable).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import signal
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from benchmarks.cli_results import ResultsUsageError
from benchmarks.config import ConfigError, parse_pairs

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ELSEWHERE, EXIT_KILLED = 0, 1, 2, 3, 130

log = logging.getLogger("mesabench")


class UsageError(Exception):
    """Bad command-line input."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        raise UsageError(message)


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
    run.add_argument("--resume", metavar="RUN_ID", help="continue a killed run")
    run.add_argument(
        "--data-root", default=None, help="folder with real datasets (else $MESABENCH_DATA)"
    )
    run.add_argument("--parent", default=None, metavar="RUN_ID", help="a sweep's parent run")
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

    lst = sub.add_parser("list", help="list methods or benchmarks")
    lst.add_argument("what", choices=["methods", "benchmarks"])

    show = sub.add_parser(
        "show", help="print a benchmark's resolved spec, or a method's config on a benchmark"
    )
    show.add_argument("name", help="a benchmark, or a method (shown on --benchmark)")
    show.add_argument("--method", help="also print this method's resolved config")
    show.add_argument("--benchmark", help="with a method's name: the benchmark (default "
                      "sinusoid-5shot)")  # fmt: skip
    show.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    from benchmarks.cli_results import add_commands

    add_commands(sub)

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
    rep.add_argument("--tracking-uri", default=None)
    rep.add_argument("--data-root", default=None, help="folder with real datasets")
    return parser


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    return parse_pairs(items, "--set")


def _report_plugin_errors(console: Console) -> None:
    from benchmarks.plugins import load_plugins

    for line in load_plugins():
        log.warning(line)


# -- commands ---------------------------------------------------------------------------
def cmd_list(args, console: Console) -> int:
    from benchmarks.plugins import load_plugins, plugins_disabled
    from benchmarks.specs import BENCHMARKS
    from methods.registry import METHODS

    load_plugins()
    registry = METHODS if args.what == "methods" else BENCHMARKS
    table = Table(title=args.what)
    table.add_column("name", style="bold")
    table.add_column("protocol")
    table.add_column("source")
    table.add_column("description")
    for entry in registry:
        if args.what == "methods":
            protocol = ", ".join(sorted(getattr(entry.value.cls, "protocols", ())))
        else:
            protocol = entry.value.protocol_name
        table.add_row(entry.name, protocol, entry.source, entry.description)
    console.print(table)
    if plugins_disabled():
        console.print("plugins disabled (MESABENCH_DISABLE_PLUGINS)")
    _report_plugin_errors(console)
    return EXIT_OK


def cmd_show(args, console: Console) -> int:
    import json

    from benchmarks.config import ConfigError, apply_overrides, as_dict
    from benchmarks.plugins import load_plugins
    from benchmarks.runner import DEFAULT_BENCHMARK, benchmark_spec, plan_run
    from benchmarks.specs import BENCHMARKS
    from methods.registry import METHODS

    load_plugins()
    benchmark, method = args.name, args.method
    if benchmark not in BENCHMARKS.entries and benchmark in METHODS.entries:
        benchmark, method = args.benchmark or DEFAULT_BENCHMARK, args.name
    elif args.benchmark is not None:
        raise ConfigError("--benchmark goes with a method's name: show METHOD --benchmark B")
    spec = benchmark_spec(benchmark)
    overrides = parse_overrides(args.overrides)
    body = json.loads(spec.describe())
    if method is None:
        sections = apply_overrides(spec.sections(), overrides)
    else:
        plan = plan_run(method, benchmark, 0, overrides, device="cpu")
        sections = plan.sections()
        body["method"] = {"name": plan.method_name, **as_dict(plan.method)}
    body["task"], body["protocol"] = as_dict(sections["task"]), as_dict(sections["protocol"])
    if hasattr(sections["task"], "derived"):  # e.g. a stream's angles, drawn from its seed
        body["derived"] = sections["task"].derived()
    console.print_json(json.dumps(body, default=str))
    return EXIT_OK


def _final_table(final: dict[str, float]) -> Table:
    table = Table(title="final metrics")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in sorted(final):
        if key.endswith("_ci95"):
            continue
        value = final[key]
        ci = final.get(f"{key}_ci95")
        text = f"{value:.4f}" if ci is None else f"{value:.4f} ± {ci:.4f}"
        table.add_row(key, text)
    return table


def cmd_run(args, console: Console) -> int:
    from benchmarks.runner import (
        DEFAULT_BENCHMARK,
        plan_from_dict,
        plan_run,
        prepare_data,
        record_data_files,
    )
    from benchmarks.tracking import MlflowTracker
    from methods.registry import METHODS

    overrides = parse_overrides(args.overrides)
    _report_plugin_errors(console)
    if args.system_metrics and importlib.util.find_spec("psutil") is None:
        raise UsageError("--system-metrics needs psutil: pip install psutil")
    claim = None
    if args.resume is None:
        if not args.method:
            raise UsageError("run needs --method (or --resume RUN_ID)")
        # All validation happens here, before the store is touched.
        plan = plan_run(
            args.method,
            args.benchmark or DEFAULT_BENCHMARK,
            args.seed,
            overrides,
            args.device,
            preset=args.preset,
            data_root=args.data_root,
        )
        data_files = prepare_data(plan)
        tracker = MlflowTracker(args.tracking_uri)
        if args.exclusive:
            claim = _claim_cell(tracker, plan)
            if claim is None:
                return EXIT_ELSEWHERE
        try:
            run_id = tracker.start(plan, METHODS.get(plan.method_name).source, args.parent)
        except BaseException:
            if claim is not None:
                claim.release()
            raise
        if claim is not None:
            claim.hold(run_id)
        record_data_files(tracker, data_files)
        checkpoint = None
    else:
        if args.method or args.benchmark or overrides or args.data_root:
            raise UsageError("--resume takes no --method, --benchmark, --set or --data-root")
        tracker = MlflowTracker(args.tracking_uri)
        try:
            body = tracker.reopen(args.resume)
        except Exception as err:  # unknown or FINISHED run id, missing config artifact
            raise UsageError(f"cannot resume run {args.resume!r}: {err}") from None
        plan = plan_from_dict(body)
        run_id = args.resume
        prepare_data(plan)  # before the run is touched: a refusal leaves it as it was
        if plan.learner_from:  # an evaluation: score the saved learner again
            # The learner it scored: the one its start recorded.
            wanted = tracker.client.get_run(run_id).data.tags.get("mesabench.learner")
            _, learner = _saved_learner(tracker, plan.learner_from, wanted)
            return _evaluate(plan, tracker, learner, console, resume=True)
        checkpoint = tracker.load_checkpoint()
        _check_resumable(args.resume, plan, checkpoint)  # before the run is touched
        tracker.resume()
    if args.system_metrics:
        tracker.before_close.append(
            _system_metrics(tracker, run_id, resumed=args.resume is not None)
        )
    try:
        return _train(plan, tracker, run_id, checkpoint, console)
    finally:
        if claim is not None:
            claim.release()


def _check_resumable(run_id: str, plan, checkpoint) -> None:
    """Refuse, leaving the run as it is, a checkpoint its protocol cannot continue (one
    written before the protocols shared one skeleton, or by another protocol)."""
    from benchmarks.protocols import PROTOCOLS
    from benchmarks.runner import benchmark_spec

    if checkpoint is None:
        return
    protocol = PROTOCOLS[benchmark_spec(plan.benchmark).protocol_name]
    problem = protocol.checkpoint_problem(checkpoint)
    if problem is not None:
        raise UsageError(f"cannot resume run {run_id!r}: {problem}; start the run afresh")


def _system_metrics(tracker, run_id: str, resumed: bool):
    """Start MLflow's system-metrics monitor on the run (a sample every 10 s, logged as
    ``system/*``); returns what stops it, to call before the run is closed: the last,
    partial window is logged too, so a run shorter than 10 s still gets one sample."""
    import contextlib
    import io

    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    with contextlib.redirect_stderr(io.StringIO()):  # its start-up notes are not ours to print
        monitor = SystemMetricsMonitor(
            run_id, sampling_interval=10, resume_logging=resumed, tracking_uri=tracker.uri
        )
        monitor.start()

    def stop() -> None:
        monitor.finish()
        last = monitor.aggregate_metrics()
        if last:
            monitor.publish_metrics(last)
            monitor.mlflow_logger.flush()

    return stop


def cmd_evaluate(args, console: Console) -> int:
    """Score a finished run's saved learner on its benchmark or another compatible one; the
    new run records which run it came from."""
    import dataclasses

    from benchmarks.runner import fit_learner, plan_run, prepare_data, record_data_files
    from benchmarks.tracking import MlflowTracker
    from mesabench_datasets.data_root import using_data_root

    tracker = MlflowTracker(args.tracking_uri)
    try:
        source = tracker.client.get_run(args.run_id)
    except Exception:
        raise UsageError(f"evaluate: no run {args.run_id!r} in {tracker.uri}") from None
    if source.info.status != "FINISHED":
        raise UsageError(f"evaluate: run {args.run_id} is {source.info.status}, not FINISHED")
    body = tracker.read_plan(args.run_id)
    if body.get("learner_from"):
        raise UsageError(f"evaluate: run {args.run_id} is itself an evaluation; name the "
                         f"training run {body['learner_from']}")  # fmt: skip
    learner_name, saved = _saved_learner(tracker, args.run_id, args.learner)
    # The learner's own method settings; on its own benchmark its task and protocol
    # settings too (so that the run's test is repeated exactly), elsewhere the target's;
    # then the user's --set.
    benchmark = args.benchmark or body["benchmark"]
    sections = ("method", "task", "protocol") if benchmark == body["benchmark"] else ("method",)
    overrides = {f"{part}.{k}": v for part in sections for k, v in body[part].items()}
    overrides.update(parse_overrides(args.overrides))
    plan = plan_run(
        body["method_name"],
        benchmark,
        body["seed"] if args.seed is None else args.seed,
        overrides,
        args.device,
        data_root=args.data_root,
    )
    plan = dataclasses.replace(plan, learner_from=args.run_id)
    data_files = prepare_data(plan)
    with using_data_root(plan.data_root):
        fit_learner(plan, saved)  # refused here, before anything is recorded
    origin = {"mesabench.evaluated_from": args.run_id, "mesabench.learner": learner_name,
              "mesabench.trained_on": body["benchmark"]}  # fmt: skip
    method_source = source.data.tags.get("mesabench.method_source", "?")
    tracker.start(plan, method_source, extra_tags=origin)
    record_data_files(tracker, data_files)
    return _evaluate(plan, tracker, saved, console)


def _saved_learner(tracker, run_id: str, wanted: str | None) -> tuple[str, dict]:
    """Which learner of run ``run_id`` (``wanted``, else ``best`` where saved, else
    ``final``) and its state."""
    for name in [wanted] if wanted else ["best", "final"]:
        saved = tracker.load_learner(run_id, name)
        if saved is not None:
            return name, saved["state"]
    raise UsageError(
        f"run {run_id} saved no {wanted or 'best'!r} learner (runs keep learners since "
        "mesabench 0.1.0 commit f4aeb5c; older runs have none)"
    )


def _claim_cell(tracker, plan):
    """Claim ``plan``'s cell; None (with one line said) when it is FINISHED elsewhere.

    While another live process holds the cell, wait: if it finishes, this attempt is not
    needed; if it dies (its heartbeat stops), this attempt takes the cell over. So a retried
    Ray task and a second sweep of the same grid neither repeat nor abandon a cell.
    """
    import time

    from benchmarks import claims
    from benchmarks.lifecycle import heartbeat_interval
    from benchmarks.sweep import finished_run_of

    benchmark, config_hash = plan.benchmark, plan.config_hash()
    waited = False
    while True:
        got = claims.acquire(tracker.client, benchmark, config_hash, plan.seed)
        if isinstance(got, claims.Claim):
            break
        if not waited:
            log.info("waiting: %s seed %d is %s", plan.method_name, plan.seed, got.describe())
            waited = True
        time.sleep(min(heartbeat_interval(), 10.0))
    # Claimed; a run that finished before our claim must not be repeated.
    done = finished_run_of(tracker, plan.method_name, benchmark, config_hash, plan.seed)
    if done is not None:
        got.release()
        log.info("not run: %s seed %d already FINISHED as run %s", plan.method_name, plan.seed,
                 done)  # fmt: skip
        return None
    return got


def _evaluate(plan, tracker, learner: dict, console: Console, resume: bool = False) -> int:
    """Score a saved learner into a started (or reopened) evaluation run."""
    if resume:
        tracker.resume()
    return _train(plan, tracker, tracker.run_id, None, console, learner=learner)


def _train(plan, tracker, run_id: str, checkpoint, console: Console, learner=None) -> int:
    """Train a started (or resumed) run, show its progress, say how it ended; with a saved
    ``learner``, score it instead (an evaluation run)."""
    from benchmarks.progress import TrainingProgress
    from benchmarks.runner import RunFailed, RunInterrupted, execute_recorded

    completed = 0 if checkpoint is None else checkpoint["iteration"]
    try:
        if checkpoint is not None:
            console.print(f"resuming run {run_id} from iteration {completed}")
        source = "" if learner is None else f" (the learner of run {plan.learner_from})"
        console.print(
            f"[bold]{plan.method_name}[/]{source} on [bold]{plan.benchmark}[/] seed {plan.seed} "
            f"({plan.device}); MLflow run {run_id}"
        )
        if learner is not None:
            final = execute_recorded(plan, tracker, learner=learner)
        else:
            with TrainingProgress(
                plan.protocol.total_steps(plan.task), completed, f"{plan.method_name}", console
            ) as progress:
                final = execute_recorded(plan, tracker, progress=progress, checkpoint=checkpoint)
    except (KeyboardInterrupt, SystemExit, BrokenPipeError) as err:
        # Outside execute_recorded (the first prints, the bar's last draw): a run already
        # closed FINISHED stays so; one not yet closed is closed the same way it would be.
        if tracker.closed_as == "FINISHED":
            return EXIT_OK
        why = "interrupted" if isinstance(err, KeyboardInterrupt) else "output pipe closed"
        if tracker.closed_as is None:
            tracker.finish("KILLED", error=why)
        sys.stderr.write(f"{why}: run {run_id} marked KILLED; resume with --resume {run_id}\n")
        return EXIT_KILLED
    except RunInterrupted as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_KILLED
    except RunFailed as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_FAILED
    console.print(_final_table(final))
    console.print(f"MLflow run id: [bold]{run_id}[/] (store: {tracker.uri})")
    if getattr(console.file, "reader_gone", False):
        sys.stderr.write(f"output closed early; run {run_id} FINISHED and is recorded\n")
    return EXIT_OK


def cmd_sweep(args, console: Console) -> int:
    from pathlib import Path

    from benchmarks.sweep import plan_cells, run_sweep, spec_from_args, spec_from_file, summary_line
    from benchmarks.tracking import MlflowTracker

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


def cmd_reproduce(args, console: Console) -> int:
    from benchmarks.reproduce import (
        HEADERS,
        catalog_rows,
        lines_to_run,
        markdown,
        reproduce,
        rows,
        verdict_counts,
    )
    from benchmarks.reproductions import TABLES, check_preset, table_named
    from benchmarks.tracking import MlflowTracker

    if args.list:
        listing = Table(title="published tables (cost: wall time on a 2-core CPU, one core "
                        "per run, all seeds)")  # fmt: skip
        for header in ("table", "claim", "lines", "seeds", "quick", "cpu", "paper"):
            listing.add_column(header)
        for row in catalog_rows(list(TABLES.values())):
            listing.add_row(*row)
        console.print(listing)
        return EXIT_OK
    if args.table is None:
        raise UsageError("reproduce needs a table name (see 'reproduce --list')")
    table = table_named(args.table)
    check_preset(args.preset)
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1 (got {args.workers})")
    lines_to_run(table, args.lines)  # a typo refused before the store is opened
    _report_plugin_errors(console)
    tracker = MlflowTracker(args.tracking_uri)
    say = (lambda line: log.info(line)) if args.markdown else console.print
    outcome = reproduce(
        table, tracker, args.preset, args.seeds, args.workers, args.warm,
        run=not args.no_run, data_root=args.data_root, progress=say, lines=args.lines,
    )  # fmt: skip
    if args.markdown:
        sys.stdout.write(markdown(outcome, tracker.uri, args.lines, args.data_root))
    else:
        shown = Table(title=f"{table.title} ({table.name}, preset {args.preset})")
        for header in HEADERS:
            shown.add_column(header)
        for row in rows(outcome):
            shown.add_row(*row)
        console.print(shown)
        console.print(f"verdicts: {verdict_counts(outcome)}")
    if outcome.failed:
        console.print(f"{outcome.failed} cell(s) FAILED or KILLED: their lines count as not run")
    return EXIT_FAILED if outcome.failed else EXIT_OK


def _results_command(name: str):
    def command(args, console: Console) -> int:
        from benchmarks import cli_results

        return getattr(cli_results, f"cmd_{name}")(args, console)

    return command


COMMANDS = {
    "run": cmd_run,
    "list": cmd_list,
    "show": cmd_show,
    "evaluate": cmd_evaluate,
    "sweep": cmd_sweep,
    "reproduce": cmd_reproduce,
    **{name: _results_command(name) for name in ("leaderboard", "report", "ui", "compare", "runs")},
}


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def _is_registry_error(err: BaseException) -> bool:
    """An unknown name from the method/benchmark registry. Checked without importing it:
    the results commands never load the registry (nor torch), so their errors cannot be
    registry errors."""
    registry = sys.modules.get("methods.registry")
    return registry is not None and isinstance(err, registry.RegistryError)


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.progress import WatchedOutput

    console = Console(file=WatchedOutput(sys.stdout))
    # Plain one-line records on stderr: readable in a terminal, a CI log and a grep. Our
    # notes at INFO; other libraries' only from WARNING (matplotlib announces a rebuilt font
    # cache at INFO, for one).
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    log.setLevel(logging.INFO)
    # MLflow's own progress notes ("Creating initial MLflow database tables...") are not ours
    # to show; its warnings and errors still are. (Read by MLflow when it is imported.)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    # A polite kill (SIGTERM) and a closed terminal (SIGHUP) are interruptions too: the run
    # is marked KILLED, not lost.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _raise_keyboard_interrupt)
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args, console)
    # ConfigError covers bad settings, an unreachable store and an impossible leaderboard.
    except (UsageError, ConfigError, ResultsUsageError) as err:
        sys.stderr.write(f"error: {err}\n")
        return EXIT_USAGE
    except LookupError as err:
        if not _is_registry_error(err):
            raise
        sys.stderr.write(f"error: {err.args[0] if err.args else err}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Before any run was started (waiting for a claim, opening the store): nothing to
        # close, and no traceback to show.
        sys.stderr.write("interrupted\n")
        return EXIT_KILLED
