"""Verifying a bundle's runs by running some of their cells again here.

``python -m benchmarks verify BUNDLE --cells K`` samples K finished runs of an imported
bundle (with a stated seed), trains each cell again from its recorded plan (in this
process; nothing is added to the store), and compares every final metric that is a result
(not a measurement of the machine: times, memory): equal to the last bit where the run was
made on this platform (machine, torch version, device), else within the benchmark's
declared ``verify_rtol``. The verdict is recorded on the imported run
(``mesabench.verified``) and shown on every board.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from benchmarks.metrics.catalog import measures_the_machine
from benchmarks.planning.config import ConfigError
from benchmarks.store.bundles import SOURCE_RUN_TAG, Bundle


@dataclass
class Verdict:
    source_run: str
    run_id: str  # the imported copy here
    #: ``identical``, ``within R`` or ``MISMATCH``.
    outcome: str
    #: The metrics that differ beyond what the outcome allows: name -> (claimed, here).
    differ: dict[str, tuple[float, float]]

    def text(self, where: str) -> str:
        day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        if self.outcome != "MISMATCH":
            return f"{self.outcome} ({day}, {where})"
        shown = "; ".join(f"{k} {a:.6g} claimed, {b:.6g} here" for k, (a, b) in self.differ.items())
        return f"MISMATCH ({day}, {where}): {shown}"


def sample_cells(bundle: Bundle, cells: int, seed: int) -> list[dict[str, Any]]:
    """``cells`` FINISHED runs of the bundle, drawn with ``seed`` (the bundle's order is
    canonical, so the same bundle and seed draw the same runs)."""
    finished = [run for run in bundle.runs if run["status"] == "FINISHED"]
    if not 1 <= cells <= len(finished):
        raise ConfigError(f"verify: --cells must be 1 to {len(finished)} (the bundle's "
                          f"finished runs), got {cells}")  # fmt: skip
    return random.Random(seed).sample(finished, cells)


def imported_copy(client, experiment: str | None, source_run: str) -> str:
    """The id of the imported copy of ``source_run`` in this store."""
    found = [] if experiment is None else client.search_runs(
        [experiment], f"tags.`{SOURCE_RUN_TAG}` = '{source_run}'", max_results=10)  # fmt: skip
    found = [r for r in found if r.info.status == "FINISHED"]
    if not found:
        raise ConfigError(f"verify: run {source_run} of the bundle is not in this store: "
                          "import the bundle first")  # fmt: skip
    return found[0].info.run_id


def same_platform(run: dict[str, Any], machine: str, torch_version: str) -> bool:
    tags = run["tags"]
    return (tags.get("mesabench.machine") == machine
            and tags.get("mesabench.torch_version") == torch_version)  # fmt: skip


def compare(claimed: dict[str, Any], here: dict[str, float], exact: bool,
            rtol: float) -> tuple[str, dict[str, tuple[float, float]]]:  # fmt: skip
    """The outcome of one cell: every result metric it claims, against this re-run."""
    differ = {}
    for key, value in sorted(claimed.items()):
        # Those that measure the machine, not the method, are never compared.
        if not key.startswith("final/") or measures_the_machine(key):
            continue
        a, b = float(value), float(here.get(key, math.nan))
        both_nan = math.isnan(a) and math.isnan(b)
        same = both_nan or (a == b if exact else math.isclose(a, b, rel_tol=rtol))
        if not same:
            differ[key] = (a, b)
    if differ:
        return "MISMATCH", differ
    return ("identical" if exact else f"within {rtol:g} (relative)"), {}


def rerun(run: dict[str, Any], data_root: str | None) -> tuple[dict[str, float], str]:
    """Train the run's cell again from its recorded plan, here; its final metrics and the
    device it ran on."""
    import torch

    from benchmarks.planning.plan import plan_from_dict
    from benchmarks.protocols.recording import MemoryRecorder
    from benchmarks.running.execute import execute, prepare_data

    body = run["artifacts"].get("config.json")
    if body is None:
        raise ConfigError(f"verify: run {run['source_run']} carries no plan (config.json)")
    plan = plan_from_dict(json.loads(body))
    if plan.config_hash() != run["tags"].get("mesabench.config_hash"):
        raise ConfigError(f"verify: run {run['source_run']}: this installation plans its cell "
                          "differently (another config hash): not comparable")  # fmt: skip
    device = plan.device if plan.device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    plan = dataclasses.replace(plan, device=device).rooted_here(data_root)
    prepare_data(plan)
    return execute(plan, MemoryRecorder()), device
