"""From a plan to final metrics: the method built, the protocol run, every way out recorded.

:func:`execute` runs a plan into any recorder; :func:`execute_recorded` runs it into a
started tracker run and closes that run FINISHED, FAILED or KILLED.
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.catalog.installed import benchmark_spec, method_entry
from benchmarks.planning.plan import RunPlan
from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols.base import executing
from benchmarks.protocols.recording import Recorder
from benchmarks.store.client import OutOfSpace
from benchmarks.store.tracking import RunClosedElsewhere
from mesabench_core import ConfigError
from mesabench_datasets.data_root import using_data_root
from methods.api import Method
from methods.common.threads import intra_op_threads


def build_method(plan: RunPlan) -> Method:
    """Seed the global RNG (weight initialisation) and construct the method."""
    torch.manual_seed(plan.seed)
    entry = method_entry(plan.method_name)
    return entry.cls(plan.method, plan.source.problem, torch.device(plan.device))


def execute(
    plan: RunPlan,
    recorder: Recorder,
    progress=None,
    checkpoint: dict[str, Any] | None = None,
    learner: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Run ``plan`` to completion and return its ``final/`` metrics; with ``learner`` (a
    saved method state, for a plan with ``learner_from``), score it without training."""
    with using_data_root(plan.data_root, plan.data_root_only):
        return _execute(plan, recorder, progress, checkpoint, learner)


def fit_learner(plan: RunPlan, learner: dict[str, Any]) -> Method:
    """The plan's method holding a saved learner's state; :class:`ConfigError` if the
    learner does not fit the plan's benchmark (another input or output size, another
    architecture) or the protocol cannot score a trained learner."""
    spec = benchmark_spec(plan.benchmark)
    if not PROTOCOLS[spec.protocol_name].can_score():
        raise ConfigError(
            f"benchmark {plan.benchmark!r} uses the {spec.protocol_name} protocol, which scores "
            "a learner only while it trains; evaluate on an episodic or continual benchmark"
        )
    method = build_method(plan)
    try:
        method.load_state_dict(learner)
    except (RuntimeError, KeyError, ValueError) as err:
        lines = [line.strip() for line in str(err).strip().splitlines()] or [type(err).__name__]
        why = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
        raise ConfigError(
            f"the learner of run {plan.learner_from} does not fit {plan.benchmark!r} "
            f"(another network or input size): {why[:300]}"
        ) from None
    return method


def _execute(plan: RunPlan, recorder: Recorder, progress, checkpoint, learner) -> dict[str, float]:
    spec = benchmark_spec(plan.benchmark)
    protocol_cls = PROTOCOLS[spec.protocol_name]
    method = build_method(plan) if learner is None else fit_learner(plan, learner)
    protocol = protocol_cls(
        plan.protocol,
        plan.source,
        plan.seed,
        recorder,
        torch.device(plan.device),
        progress=progress,
    )
    threads = plan.execution_choices().get("threads")  # a method's choice, as text
    count = None if threads is None else int(threads)
    with executing(plan.protocol, method, protocol.device), intra_op_threads(count):
        if learner is not None:
            return protocol.evaluate_learner(method)
        return protocol.run(method, checkpoint=checkpoint)


def prepare_data(plan) -> list:
    """Load the benchmark's data before anything is recorded. Missing or malformed data is
    bad input: :class:`ConfigError` (exit 2 on the command line) saying where we looked and
    what to do. Returns the data files found while loading (for :func:`record_data_files`)."""
    from mesabench_datasets.data_root import (
        DataNotFoundError,
        DatasetFormatError,
        files_read,
        using_data_root,
    )

    before = set(files_read())
    try:
        with using_data_root(plan.data_root, plan.data_root_only):
            plan.source.prepare()
    except (DataNotFoundError, DatasetFormatError) as err:
        raise ConfigError(str(err)) from None
    return sorted(set(files_read()) - before)


#: The artifact listing the data files a run read, with their sizes and SHA-256 digests.
DATA_FILES_PATH = "data_files.json"


def record_data_files(tracker, files: list) -> None:
    """Log what the run read: path, size and digest of each data file (none: synthetic),
    and the run's datasets as MLflow inputs (the UI's dataset column)."""
    import json

    from mesabench_datasets.data_root import file_digests

    digests = file_digests(files) if files else []
    if digests:
        tracker.log_text(json.dumps(digests, indent=2), DATA_FILES_PATH)
    tracker.log_datasets(digests)


class RunInterrupted(Exception):
    """The run was interrupted (Ctrl-C, SIGTERM, SIGHUP, a closed output pipe) and is
    recorded KILLED; ``--resume`` (or ``benchmarks.run(resume=...)``) continues it."""

    def __init__(self, run_id: str, why: str):
        super().__init__(f"{why}: run {run_id} marked KILLED; resume with --resume {run_id}")
        self.run_id, self.why = run_id, why


class RunFailed(Exception):
    """The run raised and is recorded FAILED with the reason (``error`` tag, error.txt)."""

    def __init__(self, run_id: str, reason: str, closed: bool = True):
        where = (
            f"run {run_id} marked FAILED"
            if closed
            else f"run {run_id} could not be closed: it stays RUNNING until its heartbeat is "
            "stale, then shows as lost; what it logged before is kept"
        )
        first = (reason.strip().splitlines() or [""])[0]  # the rest is in the run's error tag
        super().__init__(f"run failed: {first} ({where})")
        self.run_id, self.reason = run_id, reason


class RunClosedMeanwhile(RunFailed):
    """Another process closed the run while this one was silent (paused past the stale
    limit): it stays as that process closed it, its late results kept in it."""

    def __init__(self, late: RunClosedElsewhere):
        Exception.__init__(self, str(late))
        self.run_id, self.reason = late.run_id, str(late)


def execute_recorded(
    plan: RunPlan, tracker, progress=None, checkpoint=None, learner=None, interruptions=None
) -> dict[str, float]:
    """Run ``plan`` into a started (or resumed) tracker run and close that run.

    Every way out is recorded: FINISHED with the final metrics; an exception is FAILED
    with its reason (raises :class:`RunFailed`); Ctrl-C, SIGTERM, SIGHUP and an output
    pipe found closed while training are KILLED and resumable (raises
    :class:`RunInterrupted`). An interruption that lands after the run was closed
    FINISHED leaves it FINISHED. ``interruptions``: the signals held while the run was
    written into the store (:class:`~benchmarks.running.console.InterruptionsHeld`), acted
    on first, where a KILLED close follows.
    """
    import traceback

    try:
        if interruptions is not None:  # held while the run was opened: acted on here
            interruptions.release()
        final = execute(plan, tracker, progress=progress, checkpoint=checkpoint, learner=learner)
        tracker.finish("FINISHED")
        return final
    except RunClosedElsewhere as late:
        raise RunClosedMeanwhile(late) from None
    except OutOfSpace as full:  # closed FAILED; what it could not write kept elsewhere
        raise RunFailed(tracker.run_id, str(full), closed=full.closed) from None
    except (KeyboardInterrupt, SystemExit, BrokenPipeError) as err:
        if tracker.closed_as == "FINISHED":
            return _final_of(tracker)
        why = "interrupted" if isinstance(err, KeyboardInterrupt) else "output pipe closed"
        try:
            tracker.finish("KILLED", error=why)
        except RunClosedElsewhere as late:
            raise RunClosedMeanwhile(late) from None
        except OutOfSpace as full:
            raise RunFailed(tracker.run_id, str(full), closed=full.closed) from None
        raise RunInterrupted(tracker.run_id, why) from None
    except Exception as err:
        from benchmarks.store.reader import StoreUnreachable

        reason = f"{type(err).__name__}: {err}"
        try:
            try:
                tracker.log_text(traceback.format_exc(), "error.txt")
            finally:
                tracker.finish("FAILED", error=reason)
        except RunClosedElsewhere as late:
            raise RunClosedMeanwhile(late) from None
        except OutOfSpace as full:
            raise RunFailed(tracker.run_id, str(full), closed=full.closed) from None
        except StoreUnreachable:  # the store itself is gone (a server away too long)
            raise RunFailed(tracker.run_id, str(err), closed=False) from err
        raise RunFailed(tracker.run_id, reason) from err


def _final_of(tracker) -> dict[str, float]:
    metrics = tracker.client.get_run(tracker.run_id).data.metrics
    return {k: v for k, v in metrics.items() if k.startswith("final/")}
