"""The run service: every run, whoever asks for it (the command line, the Python API, a
sweep's cell, a warm cell), goes through here.

A caller states what it wants as a :class:`RunRequest` (or an :class:`EvaluationRequest`);
the service validates it into a plan, loads the data, claims the cell when asked to, starts
(or reopens) the MLflow run, records the data files it read, and hands back a
:class:`StartedRun` to execute. :func:`run_command` and :func:`evaluate_command` add what a
person sees: the progress bar, the final table, one line for each way a run can end, and
the exit codes below.

Exit codes: 0 done; 1 the run failed (recorded as FAILED); 2 bad input (nothing written);
3 not run: with ``exclusive``, the cell is FINISHED (by another process); 130 interrupted
(Ctrl-C, SIGTERM, SIGHUP or a closed output pipe; recorded as KILLED, resumable).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.catalog.installed import benchmark_spec, report_plugin_errors
from benchmarks.planning.plan import DEFAULT_BENCHMARK, RunPlan, plan_from_dict, plan_run
from benchmarks.protocols import PROTOCOLS
from benchmarks.running.console import (
    EXIT_KILLED,
    InterruptionsHeld,
    TrainingProgress,
    answered,
    prepare_process,
    print_table,
)
from benchmarks.running.execute import (
    RunFailed,
    RunInterrupted,
    execute_recorded,
    fit_learner,
    prepare_data,
    record_data_files,
)
from benchmarks.running.request import EvaluationRequest, RunRequest
from benchmarks.store import claims
from benchmarks.store.lifecycle import heartbeat_interval, is_lost, last_heartbeat
from benchmarks.store.tracking import MlflowTracker, RunClosedElsewhere
from mesabench_core import ConfigError
from mesabench_datasets.data_root import using_data_root
from methods.registry import METHODS

EXIT_OK, EXIT_FAILED, EXIT_ELSEWHERE = 0, 1, 3

log = logging.getLogger("mesabench")


@dataclass
class StartedRun:
    """A run recorded RUNNING in the store, ready to execute."""

    plan: RunPlan
    tracker: MlflowTracker
    run_id: str
    #: Where a resumed run continues from (None: from the start).
    checkpoint: dict[str, Any] | None = None
    #: An evaluation's saved learner, scored instead of trained.
    learner: dict[str, Any] | None = None
    claim: Any = None
    #: A killed run reopened (``--resume``), with or without a checkpoint to go on from.
    resumed: bool = False
    #: Signals held since the run was written (see :class:`InterruptionsHeld`): acted on
    #: once :meth:`execute` can close the run KILLED.
    interruptions: InterruptionsHeld | None = None

    def execute(self, progress=None) -> dict[str, float]:
        """Run to the end and close the run (see :func:`execute_recorded`)."""
        return execute_recorded(self.plan, self.tracker, progress=progress,
                                checkpoint=self.checkpoint, learner=self.learner,
                                interruptions=self.interruptions)  # fmt: skip

    def release(self) -> None:
        if self.interruptions is not None:  # never executed: the handlers go back as they were
            self.interruptions.release(deliver=False)
        if self.claim is not None:
            self.claim.release()
            self.claim = None


def _begin(plan: RunPlan, data_files: list, tracker: MlflowTracker, method_source: str,
           parent: str | None = None, extra_tags: dict[str, str] | None = None,
           claim=None) -> tuple[str, InterruptionsHeld]:  # fmt: skip
    """The one way a new run enters the store: created with its plan, params and tags, its
    claim (if any) pointed at it, the data files it read recorded. Returns the run's id
    and the interruptions held from before the run was written (to hand to the
    :class:`StartedRun`, whose execution acts on them)."""
    held = InterruptionsHeld()
    try:
        run_id = tracker.start(plan, method_source, parent, extra_tags=extra_tags)
    except BaseException:
        held.release(deliver=False)
        if claim is not None:
            claim.release()
        raise
    try:
        if claim is not None:
            claim.hold(run_id)
        record_data_files(tracker, data_files)
    except BaseException as err:
        # The run is written but will not execute: close it FAILED with the reason (never
        # left RUNNING with no process behind it), and give its cell back.
        held.release(deliver=False)
        try:
            tracker.finish("FAILED", error=f"{type(err).__name__}: {err}")
        finally:
            if claim is not None:
                claim.release()
        raise
    return run_id, held


def open_run(request: RunRequest) -> StartedRun | None:
    """Validate ``request``, then start (or reopen) its run. Every mistake in the request
    is found before the store is touched (:class:`~mesabench_core.BadInput`). None: an
    ``exclusive`` request whose cell another process has FINISHED."""
    if request.system_metrics and importlib.util.find_spec("psutil") is None:
        raise ConfigError("--system-metrics needs psutil: pip install psutil")
    if request.resume is not None:
        started = _reopen(request)
    else:
        if not request.method:
            raise ConfigError("run needs --method (or --resume RUN_ID)")
        plan = plan_run(request.method, request.benchmark or DEFAULT_BENCHMARK, request.seed,
                        dict(request.settings), request.device, preset=request.preset,
                        data_root=request.data_root, tuning=request.tuning)  # fmt: skip
        data_files = prepare_data(plan)
        tracker = MlflowTracker(request.tracking_uri)
        claim = None
        if request.exclusive:
            claim = _claim_cell(tracker, plan)
            if claim is None:
                return None
        run_id, held = _begin(plan, data_files, tracker, METHODS.get(plan.method_name).source,
                              request.parent, claim=claim)  # fmt: skip
        started = StartedRun(plan, tracker, run_id, claim=claim, interruptions=held)
    if request.system_metrics:
        try:
            started.tracker.before_close.append(
                _system_metrics(started.tracker, started.run_id, resumed=request.resume is not None)
            )
        except BaseException:
            started.release()
            raise
    return started


def _reopen(request: RunRequest) -> StartedRun:
    if request.method or request.benchmark or request.settings or request.data_root:
        raise ConfigError("--resume takes no --method, --benchmark, --set or --data-root")
    tracker = MlflowTracker(request.tracking_uri)
    claim = _claim_for_resume(tracker, request.resume)
    try:
        started = _reopened(tracker, request.resume)
    except BaseException:
        claim.release()
        raise
    # Held only now that the run is RUNNING again: a claim names a live run, or (before
    # that) is fresh by its own time stamp, so no second resume can take it over between.
    started.claim = claim
    try:
        claim.hold(request.resume)
    except BaseException:
        started.release()
        raise
    return started


def _claim_for_resume(tracker: MlflowTracker, run_id: str):
    """One writer per run: the run's cell claimed for this process (not yet pointed at the
    run), or a refusal while the run is alive (its process still beats or is paused here)
    or another resume (or a sweep) holds the cell."""
    try:
        run = tracker.client.get_run(run_id)
    except Exception:
        raise ConfigError(f"cannot resume run {run_id!r}: no such run in {tracker.uri}") from None
    tags = dict(run.data.tags)
    if run.info.status == "RUNNING" and not is_lost("RUNNING", tags, run.info.start_time):
        beat = last_heartbeat(tags)
        age = "" if beat is None else f" (heartbeat {time.time() - beat:.0f} s ago)"
        raise ConfigError(f"cannot resume run {run_id}: it is still running{age}; stop it "
                          "first, or let it finish")  # fmt: skip
    cell = (tags.get("mesabench.benchmark"), tags.get("mesabench.config_hash"),
            tags.get("mesabench.seed"))  # fmt: skip
    if None in cell:
        raise ConfigError(f"cannot resume run {run_id}: it is no run of a method (a sweep's "
                          "parent run?)")  # fmt: skip
    got = claims.acquire(tracker.client, cell[0], cell[1], int(cell[2]), resuming=run_id)
    if not isinstance(got, claims.Claim):
        raise ConfigError(f"cannot resume run {run_id}: its cell is {got.describe()}")
    return got


def _reopened(tracker: MlflowTracker, run_id: str) -> StartedRun:
    try:
        body = tracker.reopen(run_id)
    except Exception as err:  # unknown or FINISHED run id, missing config artifact
        raise ConfigError(f"cannot resume run {run_id!r}: {err}") from None
    plan = plan_from_dict(body)
    prepare_data(plan)  # before the run is touched: a refusal leaves it as it was
    if plan.learner_from:  # an evaluation: score the saved learner again
        # The learner it scored: the one its start recorded.
        wanted = tracker.client.get_run(run_id).data.tags.get("mesabench.learner")
        _, learner = _saved_learner(tracker, plan.learner_from, wanted)
        return StartedRun(plan, tracker, run_id, learner=learner, resumed=True,
                          interruptions=_resume(tracker))  # fmt: skip
    checkpoint = tracker.load_checkpoint()
    _check_resumable(run_id, plan, checkpoint)  # before the run is touched
    return StartedRun(plan, tracker, run_id, checkpoint=checkpoint, resumed=True,
                      interruptions=_resume(tracker))  # fmt: skip


def _resume(tracker: MlflowTracker) -> InterruptionsHeld:
    """Mark the reopened run RUNNING again, interruptions held from before (as
    :func:`_begin` holds them)."""
    held = InterruptionsHeld()
    try:
        tracker.resume()
    except BaseException:
        held.release(deliver=False)
        raise
    return held


def open_evaluation(request: EvaluationRequest) -> StartedRun:
    """Start a run that scores a finished run's saved learner; refused (bad input) before
    anything is recorded when the run, its learner or the target benchmark do not fit."""
    tracker = MlflowTracker(request.tracking_uri)
    try:
        source = tracker.client.get_run(request.run_id)
    except Exception:
        raise ConfigError(f"evaluate: no run {request.run_id!r} in {tracker.uri}") from None
    if source.data.tags.get("mesabench.method") is None:  # a sweep's parent, say
        raise ConfigError(f"evaluate: run {request.run_id} is no training run of a method "
                          "(a sweep's parent run?); name one of its cells")  # fmt: skip
    if source.info.status != "FINISHED":
        raise ConfigError(f"evaluate: run {request.run_id} is {source.info.status}, not "
                          "FINISHED")  # fmt: skip
    body = tracker.read_plan(request.run_id)
    if body.get("learner_from"):
        raise ConfigError(f"evaluate: run {request.run_id} is itself an evaluation; name the "
                          f"training run {body['learner_from']}")  # fmt: skip
    learner_name, saved = _saved_learner(tracker, request.run_id, request.learner)
    # The learner's own method settings; on its own benchmark its task and protocol
    # settings too (so that the run's test is repeated exactly), elsewhere the target's;
    # then the user's settings.
    benchmark = request.benchmark or body["benchmark"]
    sections = ("method", "task", "protocol") if benchmark == body["benchmark"] else ("method",)
    carried = {f"{part}.{k}": v for part in sections for k, v in body[part].items()}
    plan = plan_run(body["method_name"], benchmark,
                    body["seed"] if request.seed is None else request.seed,
                    dict(request.settings), request.device, data_root=request.data_root,
                    carried=carried)  # fmt: skip
    plan = dataclasses.replace(plan, learner_from=request.run_id)
    data_files = prepare_data(plan)
    with using_data_root(plan.data_root, plan.data_root_only):
        fit_learner(plan, saved)  # refused here, before anything is recorded
    origin = {"mesabench.evaluated_from": request.run_id, "mesabench.learner": learner_name,
              "mesabench.trained_on": body["benchmark"]}  # fmt: skip
    method_source = source.data.tags.get("mesabench.method_source", "?")
    run_id, held = _begin(plan, data_files, tracker, method_source, extra_tags=origin)
    return StartedRun(plan, tracker, run_id, learner=saved, interruptions=held)


def _check_resumable(run_id: str, plan: RunPlan, checkpoint) -> None:
    """Refuse, leaving the run as it is, a checkpoint its protocol cannot continue (one
    written before the protocols shared one skeleton, or by another protocol)."""
    if checkpoint is None:
        return
    protocol = PROTOCOLS[benchmark_spec(plan.benchmark).protocol_name]
    problem = protocol.checkpoint_problem(checkpoint)
    if problem is not None:
        raise ConfigError(f"cannot resume run {run_id!r}: {problem}; start the run afresh")


def _saved_learner(tracker: MlflowTracker, run_id: str, wanted: str | None) -> tuple[str, dict]:
    """Which learner of run ``run_id`` (``wanted``, else ``best`` where saved, else
    ``final``) and its state."""
    for name in [wanted] if wanted else ["best", "final"]:
        saved = tracker.load_learner(run_id, name)
        if saved is not None:
            return name, saved["state"]
    raise ConfigError(
        f"run {run_id} saved no {wanted or 'best'!r} learner (runs keep learners since "
        "mesabench 0.1.0 commit f4aeb5c; older runs have none)"
    )


def _claim_cell(tracker: MlflowTracker, plan: RunPlan):
    """Claim ``plan``'s cell; None (with one line said) when it is FINISHED elsewhere.

    While another live process holds the cell, wait: if it finishes, this attempt is not
    needed; if it dies (its heartbeat stops), this attempt takes the cell over. So a retried
    Ray task and a second sweep of the same grid neither repeat nor abandon a cell.
    """
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
    done = claims.finished_run_of(tracker, plan.method_name, benchmark, config_hash, plan.seed)
    if done is not None:
        got.release()
        log.info("not run: %s seed %d already FINISHED as run %s", plan.method_name, plan.seed,
                 done)  # fmt: skip
        return None
    return got


def _system_metrics(tracker: MlflowTracker, run_id: str, resumed: bool):
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


# -- what a person sees -------------------------------------------------------------------------
def run_command(request: RunRequest, console: Console) -> int:
    """Open and run ``request`` to its end, showing progress; the exit code."""
    report_plugin_errors()
    started = open_run(request)
    if started is None:
        return EXIT_ELSEWHERE
    try:
        return run_to_end(started, console)
    finally:
        started.release()


def run_cell(body: Mapping[str, Any]) -> int:
    """A cell's run in this (forked) process, from its request as plain data: what ``python
    -m benchmarks run`` with the same request does, without starting an interpreter."""
    console = prepare_process()
    return answered(lambda: run_command(RunRequest.from_dict(body), console))


def evaluate_command(request: EvaluationRequest, console: Console) -> int:
    return run_to_end(open_evaluation(request), console)


def final_table(final: dict[str, float]) -> Table:
    """The run's final metrics: whole numbers as such, and a ``± x`` named for what it is
    (the 95% CI over this run's own test episodes, not a spread over seeds)."""
    has_ci = any(key.endswith("_ci95") for key in final)
    captions = []
    if has_ci:
        captions.append("± = 95% CI of the mean over this run's test episodes")
    if any(k.startswith("final/scored_sparsity/") for k in final):
        captions.append("sparsity/: the weights training ended with; scored_sparsity/: the "
                        "weights the test metrics came from (the best validation checkpoint)")
    table = Table(title="final metrics", caption="; ".join(captions) or None)
    table.add_column("metric")
    table.add_column("value ± 95% CI (test episodes)" if has_ci else "value", justify="right")
    for key in sorted(final):
        if key.endswith("_ci95"):
            continue
        value, ci = final[key], final.get(f"{key}_ci95")
        text = _number(value) if ci is None else f"{_number(value)} ± {ci:.4f}"
        table.add_row(key, text)
    return table


def _number(value: float) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) >= 1:
        return f"{int(value):d}"  # a count (parameters, steps): 89610, not 89610.0000
    return f"{value:.4f}"


def run_to_end(started: StartedRun, console: Console) -> int:
    """Execute a started (or resumed) run, show its progress, say how it ended; an
    evaluation scores its saved learner instead of training."""
    plan, tracker, run_id = started.plan, started.tracker, started.run_id
    completed = 0 if started.checkpoint is None else started.checkpoint["iteration"]
    try:
        if started.checkpoint is not None:
            console.print(f"resuming run {run_id} from iteration {completed}")
        elif started.resumed and started.learner is None:
            console.print(f"resuming run {run_id}: no checkpoint yet: from the start")
        source = "" if started.learner is None else f" (the learner of run {plan.learner_from})"
        if started.learner is not None:  # an evaluation: say what it is scored under
            changed = sorted(k for k, by in plan.set_by.items() if by == "--set")
            params = plan.flat_params()
            if changed:
                source += ", scored with " + ", ".join(f"{k}={params.get(k, '?')}"
                                                       for k in changed)  # fmt: skip
        console.print(
            f"[bold]{plan.method_name}[/]{source} on [bold]{plan.benchmark}[/] seed {plan.seed} "
            f"({plan.device}); MLflow run {run_id}", soft_wrap=True,
        )
        if started.learner is not None:
            final = started.execute()
        else:
            # A protocol config may say how long the run is (the bar's length); else the bar
            # counts without an end.
            length = getattr(plan.protocol, "total_steps", None)
            total = None if length is None else length(plan.task)
            with TrainingProgress(total, completed, f"{plan.method_name}", console) as progress:
                final = started.execute(progress=progress)
    except (KeyboardInterrupt, SystemExit, BrokenPipeError) as err:
        # Outside execute_recorded (the first prints, the bar's last draw): a run already
        # closed FINISHED stays so; one not yet closed is closed the same way it would be.
        if tracker.closed_as == "FINISHED":
            return EXIT_OK
        why = "interrupted" if isinstance(err, KeyboardInterrupt) else "output pipe closed"
        if tracker.closed_as is None:
            try:
                tracker.finish("KILLED", error=why)
            except RunClosedElsewhere as late:  # closed by another process meanwhile
                sys.stderr.write(f"{late}\n")
                return EXIT_FAILED
        sys.stderr.write(f"{why}: run {run_id} marked KILLED; resume with --resume {run_id}\n")
        return EXIT_KILLED
    except RunInterrupted as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_KILLED
    except RunFailed as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_FAILED
    print_table(console, final_table(final))
    # Not re-wrapped: an id or a store path split across lines cannot be copied.
    console.print(f"MLflow run id: [bold]{run_id}[/] (store: {tracker.uri})", soft_wrap=True)
    if getattr(console.file, "reader_gone", False):
        sys.stderr.write(f"output closed early; run {run_id} FINISHED and is recorded\n")
    return EXIT_OK
