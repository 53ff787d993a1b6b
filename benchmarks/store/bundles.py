"""Bundles: runs carried from one store to another (docs/bundles.md has the format).

A bundle is one gzip-compressed JSON document, written canonically (sorted keys, no
spaces, gzip with no name and no time stamp), so that the same runs always give the same
bytes. It holds each run's resolved plan, params, tags, status, times, its metrics' last
values and, optionally, their histories, with a SHA-256 checksum per run. Checkpoints and
saved learners stay behind: an imported run is read (boards, tables), not resumed.

Import is idempotent: a run carries its source run id, and a run already imported (or the
run itself, imported back into its own store) is not added again. Every imported run says
where it came from (``mesabench.imported_from``, ``mesabench.imported_at``,
``mesabench.bundle_digest``, ``mesabench.source_run``); boards mark it. Everything a bundle
holds is checked before the store is touched: its format and version, every checksum, and
that its methods and benchmarks are installed here.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import math
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.planning.config import ConfigError
from benchmarks.store.reader import sqlite_path
from mesabench_core import BadInput

FORMAT = "mesabench-bundle"
VERSION = 1
SUFFIX = ".mesabundle"

IMPORTED_FROM_TAG = "mesabench.imported_from"
IMPORTED_AT_TAG = "mesabench.imported_at"
BUNDLE_DIGEST_TAG = "mesabench.bundle_digest"
SOURCE_RUN_TAG = "mesabench.source_run"
#: ``verify``'s verdict on an imported run (:mod:`benchmarks.results.verify`).
VERIFIED_TAG = "mesabench.verified"
#: Tags about the process that ran a run, or its place in the source store: not carried.
LOCAL_TAGS = ("mesabench.heartbeat", "mesabench.heartbeat_utc", "mesabench.heartbeat_interval_s",
              "mesabench.host", "mesabench.pid", "mesabench.process_start",
              "mlflow.parentRunId")  # fmt: skip
#: The run's artifacts a bundle carries (its resolved plan; which layer set each setting).
CARRIED_ARTIFACTS = ("config.json", "config_set_by.json")
#: Run statuses a bundle carries: runs still in flight are not results.
CARRIED_STATUSES = ("FINISHED", "FAILED", "KILLED")


def _number(value: float) -> float | str:
    """JSON has no NaN or infinity: a diverged metric is written as a string."""
    return value if math.isfinite(value) else repr(float(value))


def canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()  # fmt: skip


def checksum(run: dict[str, Any]) -> str:
    """SHA-256 of a run's canonical JSON, its own checksum left out."""
    return hashlib.sha256(canonical({k: v for k, v in run.items() if k != "checksum"})).hexdigest()


@dataclass
class Bundle:
    runs: list[dict[str, Any]]
    #: SHA-256 of the bundle's bytes (a run imported from it records this).
    digest: str = ""
    source: str = ""


# -- writing -------------------------------------------------------------------------------
def run_body(client, run, histories: bool | Collection[str], scratch: Path) -> dict[str, Any]:
    """One stored run as a bundle holds it (``run``: an MLflow run; ``scratch``: a folder
    for the artifacts it carries, read back at once). ``histories``: every metric's
    history (True), none (False), or those of the metrics named (the others' last values
    only)."""
    info, data = run.info, run.data
    tags = {k: v for k, v in data.tags.items() if k not in LOCAL_TAGS}
    body: dict[str, Any] = {
        # A run imported here is passed on under the id it was made under: a store that has
        # it (the one it came from, or one that imported it from there) finds it present.
        "source_run": tags.get(SOURCE_RUN_TAG, info.run_id),
        "benchmark": tags.get("mesabench.benchmark", ""),
        "name": info.run_name or "",
        "status": info.status,
        "start_time": info.start_time,
        "end_time": info.end_time,
        "params": dict(sorted(data.params.items())),
        "tags": dict(sorted(tags.items())),
        "metrics": {k: _number(v) for k, v in sorted(data.metrics.items())},
        "artifacts": {},
    }
    listed = {item.path for item in client.list_artifacts(info.run_id)}
    for path in CARRIED_ARTIFACTS:
        if path in listed:
            local = Path(client.download_artifacts(info.run_id, path, str(scratch)))
            body["artifacts"][path] = local.read_text()
            local.unlink()
    keys = sorted(data.metrics) if histories is True else sorted(
        set(histories or ()) & set(data.metrics))
    if keys:
        body["histories"] = {
            key: [[m.step, m.timestamp, _number(m.value)]
                  for m in sorted(client.get_metric_history(info.run_id, key),
                                  key=lambda m: (m.step, m.timestamp))]
            for key in keys
        }  # fmt: skip
    body["checksum"] = checksum(body)
    return body


def _order(body: dict[str, Any]) -> tuple:
    tags = body["tags"]
    return (body["benchmark"], tags.get("mesabench.method", ""),
            tags.get("mesabench.config_hash", ""), tags.get("mesabench.seed", ""),
            body["start_time"] or 0, body["source_run"])  # fmt: skip


def bundle_bytes(bodies: Iterable[dict[str, Any]], suite_version: str) -> bytes:
    """The bundle of ``bodies``: the same runs give the same bytes, whatever their order."""
    document = {"format": FORMAT, "version": VERSION, "written_by": suite_version,
                "runs": sorted(bodies, key=_order)}  # fmt: skip
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as packed:
        packed.write(canonical(document))
    return out.getvalue()


def write_bundle(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file, then renamed)."""
    temporary = path.with_name(f".{path.name}.partial")
    try:
        temporary.write_bytes(data)
        temporary.replace(path)
    except OSError as err:
        temporary.unlink(missing_ok=True)
        raise ConfigError(f"export: cannot write {path}: {err.strerror or err}") from None


# -- reading -------------------------------------------------------------------------------
def read_bundle(path: Path) -> Bundle:
    """Read and check a bundle: its format and version, and every run's checksum."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"import: cannot read {path}: {err.strerror or err}") from None
    try:
        document = json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError):
        raise ConfigError(f"import: {path} is no bundle (not gzip-compressed JSON)") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ConfigError(f"import: {path} is no bundle (its format is not {FORMAT!r})")
    version = document.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise ConfigError(f"import: {path} is bundle format version {version!r}; this "
                          f"mesabench reads up to version {VERSION}: upgrade mesabench")
    runs = document.get("runs")
    if not isinstance(runs, list):
        raise ConfigError(f"import: {path} holds no list of runs")
    for index, run in enumerate(runs):
        if not isinstance(run, dict) or run.get("checksum") != checksum(run):
            name = run.get("source_run", f"#{index}") if isinstance(run, dict) else f"#{index}"
            raise ConfigError(f"import: {path}: run {name} fails its checksum (the bundle was "
                              "changed or damaged); nothing imported")  # fmt: skip
    return Bundle(runs, hashlib.sha256(data).hexdigest(), path.name)


def check_installed(bundle: Bundle) -> None:
    """Every method and benchmark the bundle's runs name is installed here."""
    from benchmarks.catalog.installed import benchmark_spec, method_entry

    for run in bundle.runs:
        method = run["tags"].get("mesabench.method")
        try:
            benchmark_spec(run["benchmark"])
            if method:
                method_entry(method)
        except BadInput as err:  # an unknown name is a RegistryError, not a ConfigError
            raise ConfigError(f"import: {bundle.source}: run {run['source_run']}: {err}; "
                              "nothing imported") from None  # fmt: skip


# -- importing -----------------------------------------------------------------------------
@dataclass
class Imported:
    added: list[str] = field(default_factory=list)
    #: Runs of the bundle this store already holds (imported before, or its own).
    present: list[str] = field(default_factory=list)


def _present(client, experiment: str, run: dict[str, Any]) -> tuple[bool, list[str]]:
    """Whether the store holds the bundle's ``run`` whole (the run itself, or a copy
    imported and closed as the bundle has it), and the ids of other copies to replace: an
    import cut short leaves its copy RUNNING, and ``runs --stale --mark-failed`` may since
    have closed it FAILED as lost."""
    source = run["source_run"]
    try:
        if client.get_run(source).info.experiment_id == experiment:
            return True, []
    except Exception:  # not in this store
        pass
    copies = client.search_runs([experiment], f"tags.`{SOURCE_RUN_TAG}` = '{source}'",
                                max_results=100)  # fmt: skip
    whole = [c for c in copies if c.info.status == run["status"]
             and c.data.tags.get("error") == run["tags"].get("error")]  # fmt: skip
    return bool(whole), [c.info.run_id for c in copies if c not in whole]


@contextlib.contextmanager
def _one_import_at_a_time(tracker):
    """Two imports into one SQLite store at once would each find a run missing and add
    it: they take turns on a lock file beside the store. (A tracking server has no such
    lock: import into one from one process at a time.)"""
    db = sqlite_path(tracker.uri)
    if db is None:
        yield
        return
    with open(db.with_name(db.name + ".import-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def import_bundle(tracker, bundle: Bundle, now: float | None = None) -> Imported:
    """Add the bundle's runs to ``tracker``'s store (each once); returns what was added."""
    with _one_import_at_a_time(tracker):
        return _import_runs(tracker, bundle, now)


def _import_runs(tracker, bundle: Bundle, now: float | None) -> Imported:
    from mlflow.entities import Param

    stamp = datetime.fromtimestamp(time.time() if now is None else now, timezone.utc)
    result = Imported()
    client = tracker.client
    for run in bundle.runs:
        experiment = tracker.experiment_id(run["benchmark"])
        whole, other = _present(client, experiment, run)
        for run_id in other:
            client.delete_run(run_id)
        if whole:
            result.present.append(run["source_run"])
            continue
        tags = {**run["tags"], IMPORTED_FROM_TAG: bundle.source,
                IMPORTED_AT_TAG: stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
                BUNDLE_DIGEST_TAG: bundle.digest, SOURCE_RUN_TAG: run["source_run"]}  # fmt: skip
        created = client.create_run(experiment, start_time=run["start_time"],
                                    tags=tags, run_name=run["name"] or None)  # fmt: skip
        run_id = created.info.run_id
        params = [Param(k, v) for k, v in run["params"].items()]
        for i in range(0, len(params), 90):  # MLflow takes at most 100 params a batch
            client.log_batch(run_id, params=params[i : i + 90])
        metrics = _metrics(run, run["end_time"] or run["start_time"] or 0)
        for i in range(0, len(metrics), 900):  # ... and 1,000 metrics
            client.log_batch(run_id, metrics=metrics[i : i + 900])
        for path, text in run["artifacts"].items():
            client.log_text(run_id, text, path)
        client.set_terminated(run_id, status=run["status"], end_time=run["end_time"])
        result.added.append(run_id)
    return result


def _metrics(run: dict[str, Any], when: int) -> list:
    from mlflow.entities import Metric

    histories = run.get("histories") or {}
    # A metric with its history shipped gets every point; the others their last value,
    # at step 0.
    return [*(Metric(k, float(v), when, 0) for k, v in run["metrics"].items()
              if k not in histories),
            *(Metric(k, float(value), stamp, step)
              for k, points in histories.items() for step, stamp, value in points)]  # fmt: skip
