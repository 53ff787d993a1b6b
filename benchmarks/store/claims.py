"""Exactly one run per sweep cell: an atomic claim in the store, expiring with a heartbeat.

A claim is an MLflow experiment named after the cell (benchmark, configuration hash,
seed). Experiment names are unique in every MLflow store (a unique constraint in SQLite and
behind a tracking server), so ``create_experiment`` is an atomic test-and-set that works the
same on both: of two processes that claim one cell at the same moment, exactly one gets it.

The holder records its run id on the claim; the claim is alive while that run is RUNNING
with a fresh heartbeat (:mod:`benchmarks.store.lifecycle`). A claim whose holder died is taken
over: renamed out of the way (by id, so a late contender cannot rename a fresh claim) and
created anew, which again only one contender wins. A finished, failed or killed run
releases its claim by renaming it to a tombstone and deleting it, so the MLflow UI lists
only the claims of cells running now.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from benchmarks.store.lifecycle import (
    STALE_BEATS,
    heartbeat_interval,
    is_lost,
    last_heartbeat,
    lost_reason,
    mark_lost,
)

log = logging.getLogger("mesabench")

CLAIM_PREFIX = "mesabench-claim/"
HOLDER_TAG = "mesabench.claim_holder"
CLAIMED_AT_TAG = "mesabench.claimed_at"


def claim_name(benchmark: str, config_hash: str, seed: int) -> str:
    return f"{CLAIM_PREFIX}{benchmark}/{config_hash}/seed{seed}"


def is_claim_experiment(name: str) -> bool:
    return name.startswith(CLAIM_PREFIX)


def _already_exists(err: Exception) -> bool:
    text = str(err)
    return "RESOURCE_ALREADY_EXISTS" in text or "already exists" in text or "UNIQUE" in text


@dataclass
class Claim:
    """A claim held by this process."""

    client: object
    experiment_id: str
    name: str

    def hold(self, run_id: str) -> None:
        """Record the run that works on the claimed cell."""
        self.client.set_experiment_tag(self.experiment_id, HOLDER_TAG, run_id)

    def release(self) -> None:
        """Give the cell up (its run ended): rename to a tombstone and delete."""
        try:
            self.client.rename_experiment(
                self.experiment_id, f"{self.name}/released-{uuid.uuid4().hex[:12]}"
            )
            self.client.delete_experiment(self.experiment_id)
        except Exception as err:  # an unreleased claim expires with its holder's heartbeat
            log.warning("claim %s not released: %s", self.name, str(err).splitlines()[0][:200])


@dataclass(frozen=True)
class Holder:
    """Who holds a cell that we could not claim."""

    run_id: str | None
    age_s: float | None  # seconds since its last heartbeat

    def describe(self) -> str:
        if self.run_id is None:
            return "being claimed by another process"
        age = "" if self.age_s is None else f", heartbeat {self.age_s:.0f} s ago"
        return f"running as run {self.run_id}{age}"


def acquire(client, benchmark: str, config_hash: str, seed: int,
            resuming: str | None = None) -> Claim | Holder:  # fmt: skip
    """Claim a cell: a :class:`Claim` if we got it, else the :class:`Holder` that has it.
    A dead holder's run is closed as lost, unless it is ``resuming``, the run the claimer
    is about to continue (closing it would only mark it FAILED on its way back to RUNNING)."""
    name = claim_name(benchmark, config_hash, seed)
    taken_from = None
    for _ in range(5):
        try:
            experiment_id = client.create_experiment(
                name, tags={CLAIMED_AT_TAG: f"{time.time():.3f}"}
            )
            if taken_from is not None and taken_from != resuming:
                _close_lost(client, taken_from)
            return Claim(client, experiment_id, name)
        except Exception as err:
            if not _already_exists(err):
                raise
        existing = client.get_experiment_by_name(name)
        if existing is None:
            continue  # released between our create and our lookup: try again
        holder = _live_holder(client, existing)
        if holder is not None:
            return holder
        taken_from = dict(existing.tags or {}).get(HOLDER_TAG)
        # The holder is gone: move its claim out of the way, by id, then race to create.
        try:
            client.rename_experiment(
                existing.experiment_id, f"{name}/expired-{uuid.uuid4().hex[:12]}"
            )
            client.delete_experiment(existing.experiment_id)
        except Exception:
            pass  # another contender moved it first
    return Holder(None, None)


def _close_lost(client, run_id: str) -> None:
    """The claim was taken from a dead holder: close its run FAILED ("lost: no heartbeat
    since T") rather than leave it RUNNING until some later sweep reads it. Its process
    may have died where nothing saw its exit code (a killed Ray worker's cell)."""
    try:
        run = client.get_run(run_id)
        tags = dict(run.data.tags)
        if is_lost(run.info.status, tags, run.info.start_time):
            mark_lost(client, run_id, lost_reason(tags, run.info.start_time))
    except Exception as err:  # the store flags it stale in any case
        log.warning("lost run %s not closed: %s", run_id, str(err).splitlines()[0][:200])


def _live_holder(client, experiment) -> Holder | None:
    """The claim's holder if it is alive, else None (the claim may be taken over)."""
    if getattr(experiment, "lifecycle_stage", "active") != "active":
        return None
    tags = dict(experiment.tags or {})
    run_id = tags.get(HOLDER_TAG)
    now = time.time()
    if run_id is None:
        # Claimed, run not created yet: alive for as long as a heartbeat would be.
        try:
            claimed = float(tags.get(CLAIMED_AT_TAG, "0"))
        except ValueError:
            claimed = 0.0
        fresh = now - claimed <= STALE_BEATS * heartbeat_interval()
        return Holder(None, now - claimed) if fresh else None
    try:
        run = client.get_run(run_id)
    except Exception:
        return None
    tags = dict(run.data.tags)
    if run.info.status != "RUNNING" or is_lost(run.info.status, tags, run.info.start_time, now):
        return None  # ended, or silent with no process of this host behind it
    beat = last_heartbeat(tags)
    return Holder(run_id, None if beat is None else now - beat)


def cell_runs(tracker, benchmark: str, config_hash: str, seed: int, status: str) -> list:
    """The runs of one cell (configuration and seed) in ``status``."""
    experiment = tracker.experiment_id(benchmark, create=False)
    if experiment is None:
        return []
    query = (
        f"tags.`mesabench.config_hash` = '{config_hash}' and tags.`mesabench.seed` = '{seed}' "
        f"and attributes.status = '{status}'"
    )
    return tracker.client.search_runs([experiment], filter_string=query, max_results=100)


def finished_run_of(tracker, method: str, benchmark: str, config_hash: str, seed: int):
    """The id of a FINISHED run of this cell, or None."""
    for run in cell_runs(tracker, benchmark, config_hash, seed, "FINISHED"):
        if run.data.tags.get("mesabench.method") == method:
            return run.info.run_id
    return None
