"""MLflow as the record of every run: the only writer of results.

One experiment per benchmark, one run per (method, config, seed). Params are the resolved
config; final numbers are logged under ``final/...``; checkpoints and figures are
artifacts. The default store is SQLite at ``<cwd>/runs/mlflow.db`` with artifacts under
``<cwd>/runs/artifacts``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from mlflow.entities import Metric, Param, RunTag

from benchmarks.store.client import LOCK_RETRY_SECONDS, OutOfSpace, open_store, out_of_space
from benchmarks.store.hold import held, wait_while_held
from benchmarks.store.lifecycle import Heartbeat, heartbeat_tags, process_tags
from benchmarks.store.reader import (
    DEPARTURES_TAG,
    EXECUTION_TAG,
    TUNING_TAG,
    default_tracking_uri,
    normalise_uri,
    sqlite_path,
)
from mesabench_core import __version__

log = logging.getLogger("mesabench")
# MLflow logs every failed database call at ERROR with its traceback before raising it; we
# retry (a locked store) or report (in one line) every one of them ourselves.
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)

#: A run's checkpoints alternate between two files, each holding a sequence number: a save
#: cut short (a kill mid-upload) can spoil only the file being written, and loading takes
#: the newest file that reads whole. (``last.pt``: the single file of runs saved before.)
CHECKPOINT_SLOTS = ("checkpoints/slot-a.pt", "checkpoints/slot-b.pt")
LEGACY_CHECKPOINT_PATH = "checkpoints/last.pt"
CONFIG_PATH = "config.json"
#: Which settings layer set each field of the plan (benchmarks.planning.resolve).
SET_BY_PATH = "config_set_by.json"
#: Where a run keeps a trained learner (``final``: as training ended; ``best``: the
#: best-on-validation weights, where the protocol validates).
LEARNER_DIR = "learner"
_BATCH_LIMIT = 900  # MLflow accepts at most 1000 metrics per log_batch call
#: Space a run holds beside a SQLite store while it is open, given up when the disk fills:
#: closing the run and its last metrics take a few hundred KiB of write-ahead log.
RESERVE_BYTES = 2 * 1024 * 1024


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


#: How a unique constraint's refusal reads, from SQLite, PostgreSQL and MySQL (directly or
#: through a tracking server's error text).
_DUPLICATE_SIGNS = ("UNIQUE constraint failed", "duplicate key value", "Duplicate entry",
                    "IntegrityError")


class RunClosedElsewhere(RuntimeError):
    """Another process closed this run while it was silent (paused past the stale limit)."""

    def __init__(self, run_id: str, closed: str, status: str):
        super().__init__(
            f"run {run_id} was closed {closed} by another process while this one was silent "
            f"(paused past the stale limit); it ended {status} here, and what it measured is "
            "kept in the run, which stays closed: run the cell again for a result that counts"
        )
        self.run_id, self.closed, self.status = run_id, closed, status


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def run_name(plan) -> str:
    """``maml-s0-3fa2b1``: method, seed and the start of the config hash, so that two grid
    points (or a training run and an evaluation) never share a name."""
    kind = "-eval" if getattr(plan, "learner_from", None) else ""
    return f"{plan.method_name}{kind}-s{plan.seed}-{plan.config_hash()[:6]}"


def machine_text(device: str) -> str:
    """``x86_64 Linux, 2 CPU cores, 1 torch thread, AVX512 kernels`` (and the GPU's name on
    a CUDA device): what decides whether a re-run gives the same bits (a reduction's order
    follows the thread count, and torch's CPU kernels the vector instructions it found: the
    same seed, settings and method code gave other La-MAML numbers once the machine was
    rebuilt, and which of the two moved is not recorded)."""
    import platform

    threads = torch.get_num_threads()
    text = (f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPU cores, "
            f"{threads} torch thread{'s' if threads > 1 else ''}")  # fmt: skip
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")()
    if capability:
        text += f", {capability} kernels"
    if str(device).startswith("cuda") and torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name(torch.device(device))}"
    return text


def source_tags() -> dict[str, str]:
    """MLflow's own source tags: what ran (our command line) and who ran it."""
    import contextlib
    import getpass

    tags = {"mlflow.source.type": "LOCAL", "mlflow.source.name": "python -m benchmarks"}
    with contextlib.suppress(KeyError, OSError):  # no user name for this uid (containers)
        tags["mlflow.user"] = getpass.getuser()
    return tags


def write_tags(client, run_id: str, tags: dict[str, str]) -> None:
    """Set several tags of a run in one call (a heartbeat is two)."""
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])


class MlflowTracker:
    """A :class:`benchmarks.protocols.recording.Recorder` that writes one MLflow run."""

    def __init__(self, tracking_uri: str | None = None):
        self.uri = normalise_uri(tracking_uri or default_tracking_uri())
        self.client = open_store(self.uri)
        self.run_id: str | None = None
        #: The status the run was closed with, once it was (a closed run is never reopened
        #: by an interruption that lands afterwards).
        self.closed_as: str | None = None
        self._heartbeat: Heartbeat | None = None
        self._pending: list[Metric] = []
        self._last_flush = time.monotonic()
        self._logged_up_to: dict[str, int] = {}
        #: The run's resolved config (``RunPlan.to_dict``), saved with its learners.
        self.plan_body: dict[str, Any] | None = None
        #: Called just before the run is closed (e.g. to stop a metrics monitor in time).
        self.before_close: list[Any] = []
        #: Number of the newest checkpoint saved or loaded (CHECKPOINT_SLOTS).
        self._checkpoint_sequence = 0
        #: The first write that found the store's disk full (the run then ends FAILED).
        self.space_problem: str | None = None
        #: Space held beside a SQLite store while the run is open (RESERVE_BYTES), given up
        #: when its disk fills so that the run's last writes can still land.
        self._reserve: Path | None = None

    # -- experiments and runs -----------------------------------------------------------
    def experiment_id(self, benchmark: str, create: bool = True) -> str | None:
        experiment = self.client.get_experiment_by_name(benchmark)
        if experiment is not None and experiment.lifecycle_stage == "deleted" and create:
            # Deleted in the MLflow UI: its runs are still in the store. Restored, with a word,
            # rather than failing every new run of the benchmark.
            self.client.restore_experiment(experiment.experiment_id)
            log.warning("experiment %r had been deleted (in the MLflow UI?); restored it, "
                        "with its earlier runs", benchmark)  # fmt: skip
        if experiment is not None:
            return experiment.experiment_id
        if not create:
            return None
        db = sqlite_path(self.uri)
        location = (db.parent / "artifacts" / benchmark).as_uri() if db is not None else None
        try:
            return self.client.create_experiment(benchmark, artifact_location=location)
        except Exception:
            # Another process created it between our lookup and our create.
            experiment = self.client.get_experiment_by_name(benchmark)
            if experiment is None:
                raise
            return experiment.experiment_id

    def start(
        self,
        plan,
        method_source: str,
        parent_run_id: str | None = None,
        extra_tags: dict[str, str] | None = None,
    ) -> str:
        """Create the run for ``plan`` and record its params, tags (``extra_tags`` among them,
        from the run's first moment) and resolved config (as a child of ``parent_run_id``
        when a sweep runs it)."""
        from benchmarks.catalog.installed import (
            benchmark_spec,
            code_digest,
            headline_of,
            method_entry,
        )
        from benchmarks.catalog.specs import BENCHMARKS
        from benchmarks.metrics.catalog import RECORDED_TAG, recorded
        from benchmarks.planning.lint import LINT_TAG, SELECTED_ON_TAG, plan_findings
        from benchmarks.protocols import PROTOCOLS
        from mesabench_core import as_dict

        spec = benchmark_spec(plan.benchmark)
        # Whether the run's task and protocol settings are the benchmark's own: a board
        # ranks those first when several settings are in the store.
        defaults = (as_dict(plan.task) == as_dict(spec.task)
                    and as_dict(plan.protocol) == as_dict(spec.protocol))  # fmt: skip

        tags = {
            "mesabench.version": __version__,
            # Where the numbers were made: they travel with the run (bundles).
            "mesabench.torch_version": torch.__version__,
            "mesabench.machine": machine_text(plan.device),
            "mesabench.method": plan.method_name,
            "mesabench.method_source": method_source,
            "mesabench.benchmark": plan.benchmark,
            "mesabench.benchmark_source": BENCHMARKS.get(plan.benchmark).source,
            "mesabench.seed": str(plan.seed),
            "mesabench.config_hash": plan.config_hash(),
            # The leaderboard's default columns, kept with the run so that reading a board
            # needs no benchmark spec (and no torch).
            "mesabench.headline": json.dumps(list(headline_of(plan.benchmark))),
            # Likewise the protocol's declared metrics (which way each is better).
            RECORDED_TAG: recorded(PROTOCOLS[spec.protocol_name].metrics),
            "mesabench.default_settings": str(defaults).lower(),
            **heartbeat_tags(),
            **process_tags(),
        }
        tags[SELECTED_ON_TAG] = PROTOCOLS[spec.protocol_name].selects_on
        findings = plan_findings(plan, spec)
        for finding in findings:  # said now, and kept with the run for every board
            log.warning("%s: %s", plan.benchmark, finding)
        if findings:
            tags[LINT_TAG] = json.dumps(findings)
        # Which code ran, not only the suite's version (a built-in: the modules it imports;
        # a plugin: its package): a board never pools runs whose code differs.
        tags["mesabench.method_code"] = code_digest(method_entry(plan.method_name).cls)
        tags.update(source_tags())
        revision = git_revision()
        if revision:
            tags["mlflow.source.git.commit"] = revision
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        if getattr(plan, "tuning", None):  # a board reads it without the params
            tags[TUNING_TAG] = plan.tuning
        departures = plan.departures()
        if departures:  # what sets the run apart from the benchmark's defaults, for a board
            # JSON, so that a value holding ", " (a tuple) reads back whole; each value
            # shortened so that the tag stays within MLflow's limit.
            tags[DEPARTURES_TAG] = json.dumps({k.split(".", 1)[1]: v[:200]
                                               for k, v in departures.items()})  # fmt: skip
        choices = plan.execution_choices()
        if choices:  # the run's own (it follows the device), so a tag and not a param
            tags[EXECUTION_TAG] = json.dumps(choices)
        tags.update(extra_tags or {})
        run = self.client.create_run(
            self.experiment_id(plan.benchmark),
            run_name=run_name(plan),
            tags=tags,
        )
        self.run_id = run.info.run_id
        params = [Param(k, v[:6000]) for k, v in plan.flat_params().items()]
        for i in range(0, len(params), 90):
            self.client.log_batch(self.run_id, params=params[i : i + 90])
        self.plan_body = plan.to_dict()
        self.log_text(json.dumps(self.plan_body, indent=2, default=str), CONFIG_PATH)
        if plan.set_by:  # which layer decided each setting: how the plan came to be
            self.log_text(json.dumps(dict(plan.set_by), indent=2), SET_BY_PATH)
        self._start_heartbeat()
        return self.run_id

    def _start_heartbeat(self) -> None:
        self._reserve_space()
        run_id = self.run_id
        self._heartbeat = Heartbeat(lambda tags: write_tags(self.client, run_id, tags)).start()

    def reopen(self, run_id: str) -> dict[str, Any]:
        """Read a run to continue: returns its stored plan dict; later metrics skip logged
        steps. Nothing in the store changes until :meth:`resume`. A FINISHED run is refused
        (ValueError)."""
        run = self.client.get_run(run_id)
        if run.info.status == "FINISHED":
            raise ValueError(f"run {run_id} is FINISHED; there is nothing to resume")
        self.run_id = run_id
        for key in run.data.metrics:
            history = self.client.get_metric_history(run_id, key)
            self._logged_up_to[key] = max(m.step for m in history)
        self.plan_body = self.read_plan(run_id)
        return self.plan_body

    def read_plan(self, run_id: str) -> dict[str, Any]:
        """The resolved config a run recorded (its ``config.json``)."""
        path = self.client.download_artifacts(run_id, CONFIG_PATH, tempfile.mkdtemp())
        return json.loads(Path(path).read_text())

    def load_learner(self, run_id: str, name: str) -> dict[str, Any] | None:
        """A learner the run saved (see :meth:`save_learner`), or None if it saved none by
        that name."""
        return self._load_saved(run_id, f"{LEARNER_DIR}/{name}.pt")

    def resume(self) -> None:
        """Mark the reopened run RUNNING again, record that this process now runs it (its
        liveness is this process's from here on), and start its heartbeat."""
        self.client.update_run(self.run_id, status="RUNNING")
        # Why it stopped last time no longer describes it (a run resumed to FINISHED would
        # still read "lost: ..."); a new stop writes its own reason.
        if "error" in self.client.get_run(self.run_id).data.tags:
            self.client.delete_tag(self.run_id, "error")
        write_tags(self.client, self.run_id, process_tags())
        self._start_heartbeat()

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The newest checkpoint that reads whole (None if the run saved none)."""
        assert self.run_id is not None
        newest: dict[str, Any] | None = None
        for slot in CHECKPOINT_SLOTS:
            try:
                body = self._load_saved(self.run_id, slot)
            except Exception as err:  # a save cut short: the other slot holds the one before
                log.warning("checkpoint %s of run %s is unreadable (%s); using the other",
                            slot, self.run_id, str(err).splitlines()[0][:120])  # fmt: skip
                continue
            if body is not None and (newest is None or body["sequence"] > newest["sequence"]):
                newest = body
        if newest is None:
            return self._load_saved(self.run_id, LEGACY_CHECKPOINT_PATH)
        self._checkpoint_sequence = newest["sequence"]
        return newest["state"]

    def _load_saved(self, run_id: str, path: str) -> dict[str, Any] | None:
        """A ``torch.save``'d artifact of the run, or None if it has none at ``path``."""
        names = {a.path for a in self.client.list_artifacts(run_id, str(Path(path).parent))}
        if path not in names:
            return None
        local = self.client.download_artifacts(run_id, path, tempfile.mkdtemp())
        return torch.load(local, map_location="cpu", weights_only=False)

    def finish(self, status: str, error: str | None = None) -> None:
        """Flush what is pending and close the run as FINISHED, FAILED or KILLED.

        A run whose writes found the store's disk full is closed FAILED with that reason,
        after one more try at its pending metrics (SQLite's write-ahead log is emptied
        first, which frees its space); what still cannot be written is kept in a local file
        (or on stderr), and :class:`OutOfSpace` says where."""
        if self.run_id is None:
            return
        while self.before_close:
            self.before_close.pop()()
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self.flush()
        try:
            if self.space_problem is not None:
                kept = self._keep_unsaved() if self._pending else None
                why = f"the store ran out of space ({self.space_problem})"
                if kept:
                    why += f"; the metrics it could not write are kept in {kept}"
                status, error = "FAILED", why if error is None else f"{why}; then {error}"
                self._free_space()
            for attempt in (1, 2):  # a second time once the reserve is given up
                try:
                    self._close(status, error)
                    break
                except Exception as err:
                    if not out_of_space(err):
                        raise
                    if attempt == 2:
                        raise OutOfSpace(f"{error or 'the store ran out of space'}; not even "
                                         "the run's status could be written",
                                         closed=False) from None  # fmt: skip
                    self._free_space()
        finally:
            self._release_reserve()
        if self.space_problem is not None:
            with contextlib.suppress(Exception):  # into the store too, where it now fits
                self.client.log_batch(self.run_id, metrics=self._pending[:_BATCH_LIMIT])
            raise OutOfSpace(error, closed=True)

    def _close(self, status: str, error: str | None) -> None:
        closed = self.client.get_run(self.run_id).info.status
        if closed != "RUNNING":
            # Closed meanwhile by another process that found it silent (a pause past the
            # stale limit): what was measured stays in the run, which keeps the status it
            # was given, so that its cell never gets a second FINISHED run.
            self.client.set_tag(self.run_id, "mesabench.closed_while_running",
                                f"{status} after it was closed {closed}")  # fmt: skip
            self.closed_as = closed
            raise RunClosedElsewhere(self.run_id, closed, status)
        if error is not None:
            self.client.set_tag(self.run_id, "error", error[:5000])
        self.client.set_terminated(self.run_id, status=status)
        self.closed_as = status

    @contextlib.contextmanager
    def _unless_out_of_space(self, what: str):
        """Run a write; one that finds the disk full is noted (the run goes on measuring
        and ends FAILED) instead of ending the run with nothing kept."""
        try:
            yield
        except Exception as err:
            if not out_of_space(err):
                raise
            if self.space_problem is None:
                self.space_problem = f"{what}: {str(err).splitlines()[0][:200]}"
                log.warning("the store ran out of space (%s); the run goes on and will end "
                            "FAILED, keeping what it could not write",
                            self.space_problem)  # fmt: skip

    def _reserve_space(self) -> None:
        """Hold RESERVE_BYTES in a file beside a SQLite store while the run is open (none
        where the disk has not that much free, or for a server's store)."""
        import socket

        db = sqlite_path(self.uri)
        if db is None or self._reserve is not None:
            return
        host = socket.gethostname()
        for left in db.parent.glob(f".mesabench-reserve-{host}-*"):  # of processes killed
            pid = left.name.removeprefix(f".mesabench-reserve-{host}-").split("-")[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                with contextlib.suppress(OSError):
                    left.unlink()
        path = db.parent / f".mesabench-reserve-{host}-{os.getpid()}-{self.run_id}"
        try:
            with open(path, "wb") as handle:
                os.posix_fallocate(handle.fileno(), 0, RESERVE_BYTES)
            self._reserve = path
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()

    def _release_reserve(self) -> None:
        if self._reserve is not None:
            with contextlib.suppress(OSError):
                self._reserve.unlink()
            self._reserve = None

    def _free_space(self) -> None:
        """Give up the run's reserve, then merge and truncate a SQLite store's write-ahead
        log: enough room for the run's last writes (nothing to do for a server's store)."""
        import sqlite3

        self._release_reserve()
        db = sqlite_path(self.uri)
        if db is None:
            return
        with contextlib.suppress(sqlite3.Error):
            connection = sqlite3.connect(db, timeout=LOCK_RETRY_SECONDS)
            try:
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                connection.close()

    def _keep_unsaved(self) -> str:
        """Write the metrics the store refused into a local JSON file (strict: NaN as
        null); returns where (stderr when no folder takes it). ``runs --stale
        --mark-failed`` writes them back (:mod:`benchmarks.store.unsaved`)."""
        from benchmarks.store.unsaved import unsaved_folders

        body = {
            "run_id": self.run_id, "store": self.uri, "why": self.space_problem,
            "metrics": [{"key": m.key, "step": m.step, "timestamp": m.timestamp,
                         "value": m.value if math.isfinite(m.value) else None}
                        for m in self._pending],
        }  # fmt: skip
        text = json.dumps(body, indent=1, allow_nan=False)
        for folder in unsaved_folders():
            try:
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / f"{self.run_id}.json"
                path.write_text(text, encoding="utf-8")
                return str(path)
            except OSError:
                continue
        sys.stderr.write(text + "\n")
        return "standard error (the JSON above)"

    # -- the Recorder interface ---------------------------------------------------------
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        for key, value in metrics.items():
            if step <= self._logged_up_to.get(key, -1):
                continue  # already recorded before a resume: never write it twice
            value = float(value)
            if not math.isfinite(value):
                value = float("nan")
            self._pending.append(Metric(key, value, now, step))
        if held():  # a drill's hold point: the record is in the store before the run waits
            self.flush()
            wait_while_held()
        elif len(self._pending) >= _BATCH_LIMIT or time.monotonic() - self._last_flush > 5:
            self.flush()

    def flush(self) -> None:
        """Write the pending metrics; a batch the store refuses for lack of space stays
        pending (written later, or kept elsewhere when the run ends)."""
        with self._unless_out_of_space("writing metrics"):
            while self._pending:
                self.client.log_batch(self.run_id, metrics=self._pending[:_BATCH_LIMIT])
                self._pending = self._pending[_BATCH_LIMIT:]
        self._last_flush = time.monotonic()

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """Save into the slot not holding the newest checkpoint (see CHECKPOINT_SLOTS)."""
        self.flush()  # metrics up to the checkpoint are on disk before it is
        self._checkpoint_sequence += 1
        slot = CHECKPOINT_SLOTS[self._checkpoint_sequence % 2]
        with tempfile.TemporaryDirectory() as tmp, self._unless_out_of_space("a checkpoint"):
            path = Path(tmp) / Path(slot).name
            torch.save({"sequence": self._checkpoint_sequence, "state": state}, path)
            self.client.log_artifact(self.run_id, str(path), str(Path(slot).parent))

    def log_datasets(self, files: list[dict[str, Any]]) -> None:
        """The run's data as MLflow dataset inputs, one per split it draws from (context
        ``train``, ``validation``, ``test``): named by benchmark and split, with a digest
        of the task settings and of the files read (their SHA-256), and as source the files
        or, for a synthetic family, its settings."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        from benchmarks.planning.lint import DATA_DIGEST_TAG

        task = self.plan_body["task"]
        benchmark = self.plan_body["benchmark"]
        settings = json.dumps(task, sort_keys=True, default=str)
        files_content = "".join(sorted(f["sha256"] for f in files))
        content = settings + files_content
        if files:
            # One digest of the files' contents (not their paths: one file under two data
            # roots is the same data) as a tag: a board finds runs of one row that read
            # different data without opening every run's inputs.
            digest = hashlib.sha256(files_content.encode()).hexdigest()[:16]
            self.client.set_tag(self.run_id, DATA_DIGEST_TAG, digest)
        source_type = "local" if files else "code"
        source = json.dumps(
            {"files": [f["path"] for f in files]} if files else {"synthetic": task}, default=str
        )
        inputs = []
        for split in ("train", "validation", "test"):
            digest = hashlib.sha256(f"{split}:{content}".encode()).hexdigest()[:16]
            dataset = Dataset(f"{benchmark}:{split}", digest, source_type, source[:60000])
            inputs.append(DatasetInput(dataset, [InputTag("mlflow.data.context", split)]))
        # Runs of one experiment that log the same dataset at one moment each find it missing
        # and insert it: MLflow's check-then-insert fails the later on the unique constraint.
        # Tried again, it finds the row the other wrote and links this run to it.
        for attempt in range(3):
            try:
                self.client.log_inputs(self.run_id, datasets=inputs)
                return
            except Exception as err:
                if attempt == 2 or not any(sign in str(err) for sign in _DUPLICATE_SIGNS):
                    raise

    def save_learner(self, state: dict[str, Any], name: str) -> None:
        """``learner/NAME.pt``: the method's state with the run's resolved config and id, so
        that ``evaluate`` (or a user's own code) can rebuild and re-score it."""
        body = {"format": 1, "name": name, "run_id": self.run_id, "plan": self.plan_body,
                "state": state}  # fmt: skip
        buffer = io.BytesIO()
        torch.save(body, buffer)
        self._log_bytes(buffer.getvalue(), f"{LEARNER_DIR}/{name}.pt")

    def log_figure(self, figure: Any, path: str) -> None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", dpi=120)
        self._log_bytes(buffer.getvalue(), path)
        import matplotlib.pyplot as plt

        plt.close(figure)

    def log_text(self, text: str, path: str) -> None:
        self._log_bytes(text.encode(), path)

    def _log_bytes(self, data: bytes, path: str) -> None:
        with tempfile.TemporaryDirectory() as tmp, self._unless_out_of_space(path):
            target = Path(tmp) / Path(path).name
            target.write_bytes(data)
            folder = str(Path(path).parent)
            self.client.log_artifact(self.run_id, str(target), None if folder == "." else folder)
