"""``python -m benchmarks reproduce TABLE``: run a published table's sweeps, then judge it.

Each line of the table (:mod:`benchmarks.published.tables`) is run as an ordinary sweep of its
configuration over the seeds, all lines' sweeps through one pool of workers (cells already
FINISHED in the store are reused, so a second call only reads), then read back from the
store by its configuration hash and judged.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import platform
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.planning.config import ConfigError
from benchmarks.published.claims import Claim, Judged, Table, judge_table, run_key
from benchmarks.sweeps.spec import SweepSpec, parse_seeds, plan_cells
from benchmarks.sweeps.sweep import run_sweeps


@dataclass(frozen=True)
class Outcome:
    """A table judged at a preset over some seeds; ``failed``: cells that did not finish
    (FAILED, or KILLED while the sweep went on)."""

    table: Table
    preset: str
    seeds: tuple[int, ...]
    lines: list[Judged]
    failed: int = 0
    #: Each line's runs by seed (run id, final metrics), for the table's figure.
    runs: dict[str, dict[int, tuple[str, dict[str, float]]]] = field(default_factory=dict)


def claim_spec(claim: Claim, preset: str, seeds: Sequence[int], data_root=None) -> SweepSpec:
    """The sweep behind one line: its method and settings over the seeds."""
    return SweepSpec(
        benchmark=claim.benchmark_for(preset),
        methods=(claim.method,),
        seeds=tuple(seeds),
        settings=tuple(sorted(claim.overrides(preset).items())),
        preset=claim.benchmark_preset.get(preset),
        data_root=data_root,
        origin=f"reproduce line {claim.label!r}",
    )


def runs_by_seed(
    reader, claim: Claim, seeds: Sequence[int], hashes: set[str], preset: str
) -> dict[int, tuple[str, dict[str, float]]]:
    """The newest FINISHED run of each of the line's cells at ``preset`` (the runs of its
    configuration ``hashes``, read through ``reader``), by seed: its id and final metrics."""
    from benchmarks.results.leaderboards import read_runs

    experiment = reader.experiment_id(claim.benchmark_for(preset))
    if experiment is None:
        return {}
    newest: dict[int, tuple] = {}
    for run in read_runs(reader, experiment, ("mesabench.config_hash", hashes)):
        if run.status != "FINISHED" or run.method != claim.method or run.seed not in seeds:
            continue
        if run.seed not in newest or run.start_time > newest[run.seed][0]:
            newest[run.seed] = (run.start_time, run.run_id, run.metrics)
    return {seed: (run_id, metrics) for seed, (_, run_id, metrics) in newest.items()}


def values_by_seed(runs: dict[int, tuple[str, dict[str, float]]], metric: str) -> dict[int, float]:
    """``metric`` of each seed's run, where it logged it."""
    return {seed: metrics[metric] for seed, (_, metrics) in runs.items() if metric in metrics}


def lines_to_run(table: Table, text: str | None) -> tuple[Claim, ...]:
    """The lines whose label contains ``text`` (any case), with the lines they are held to;
    every line when ``text`` is None."""
    if text is None:
        return table.claims
    chosen = {c.label for c in table.claims if text.lower() in c.label.lower()}
    if not chosen:
        labels = "; ".join(c.label for c in table.claims)
        raise ConfigError(f"--lines: no line of {table.name} contains {text!r}; lines: {labels}")
    by_label = {c.label: c for c in table.claims}
    frontier = list(chosen)
    while frontier:
        versus = by_label[frontier.pop()].versus
        if versus is not None and versus not in chosen:
            chosen.add(versus)
            frontier.append(versus)
    return tuple(c for c in table.claims if c.label in chosen)


def reproduce(
    table: Table,
    tracker,
    preset: str,
    seeds: str | None = None,
    workers: int = 1,
    warm: bool = False,
    run: bool = True,
    data_root: str | None = None,
    progress: Callable[[str], None] | None = None,
    lines: str | None = None,
) -> Outcome:
    """Run the table's missing cells (unless ``run`` is false; only the lines matching
    ``lines`` and what they are held to, when given), then judge every line from the store."""
    from benchmarks.store.reader import open_reader

    chosen = parse_seeds(seeds or table.seeds)
    to_run = lines_to_run(table, lines)
    specs = {claim.label: claim_spec(claim, preset, chosen, data_root) for claim in table.claims}
    # Every line validated before anything runs; its configuration hash kept for reading.
    hashes = {label: set(plan_cells(spec).values()) for label, spec in specs.items()}
    failed = 0
    if run:
        # One sweep per distinct configuration (lines may read the same runs), all through
        # one pool of workers: a table's lines run side by side.
        distinct = {specs[c.label].sweep_id(): specs[c.label] for c in to_run}
        if progress:
            for claim in to_run:
                progress(f"line {claim.label!r}: {claim.method} on "
                         f"{claim.benchmark_for(preset)}")  # fmt: skip
        results = run_sweeps(
            list(distinct.values()), tracker, "local", workers, progress=progress, warm=warm
        )
        failed = sum(len(result.failed) + len(result.killed) for result in results)
        if any(result.interrupted for result in results):
            raise KeyboardInterrupt
    outcome = judged(table, preset, chosen, open_reader(tracker.uri, tracker.client), hashes)
    return dataclasses.replace(outcome, failed=failed)


def judged(table: Table, preset: str, seeds: Sequence[int], reader,
           hashes: dict[str, set[str]] | None = None) -> Outcome:  # fmt: skip
    """The table judged from what the store ``reader`` reads holds (nothing is run)."""
    if hashes is None:
        hashes = {c.label: set(plan_cells(claim_spec(c, preset, seeds)).values())
                  for c in table.claims}  # fmt: skip
    read: dict[tuple, dict] = {}  # lines of one configuration share its runs
    runs = {}
    for claim in table.claims:
        key = (claim.benchmark_for(preset), claim.method, frozenset(hashes[claim.label]))
        if key not in read:
            read[key] = runs_by_seed(reader, claim, seeds, hashes[claim.label], preset)
        runs[claim.label] = read[key]
    values = {c.label: values_by_seed(runs[c.label], c.metric) for c in table.claims}
    return Outcome(table, preset, tuple(seeds), judge_table(table, values, preset), 0, runs)


def write_figure(outcome: Outcome, client, folder: Path) -> Path | None:
    """The table's figure (PNG) and its data (CSV, beside it) in ``folder``, drawn from the
    runs the outcome read; None when the table has none or no point to draw."""
    from benchmarks.published.figures import draw_table_figure, figure_data

    declared = outcome.table.figure
    if declared is None:
        return None
    metric_of = {c.label: c.metric for c in outcome.table.claims}

    def history(run_id: str, key: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(run_id, key)}

    title = f"{outcome.table.name} ({outcome.preset})"
    data = figure_data(title, declared, outcome.runs, metric_of, history)
    figure = draw_table_figure(data, declared)
    if figure is None:
        return None
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    png = folder / f"{outcome.table.name}.png"
    figure.savefig(png, dpi=100)
    plt.close(figure)
    (folder / f"{outcome.table.name}.csv").write_text(data.csv(), encoding="utf-8")
    return png


# -- presenting ----------------------------------------------------------------------------
def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def ours_text(line: Judged) -> str:
    stats = line.ours
    if stats.n and stats.mean is None:
        return f"diverged (n={stats.n})"
    if stats.n == 0 or stats.mean is None:
        return "-"
    spread = "" if stats.std is None else f" ± {stats.std:.2g}"
    return f"{stats.mean:.4g}{spread} (n={stats.n})"


def target_text(line: Judged) -> str:
    claim = line.claim
    if claim.versus is not None:
        return f"{_number(line.target)} ({claim.versus})"
    return _number(claim.target)


def difference_text(line: Judged) -> str:
    diff = line.difference
    if line.verdict in ("basis", "not run") or diff.mean is None:
        return "-"
    if diff.ci95 is None:
        return f"{diff.mean:+.3g}"
    return f"{diff.mean:+.3g} [{diff.mean - diff.ci95:+.3g}, {diff.mean + diff.ci95:+.3g}]"


HEADERS = ("line", "method", "metric", "target", "target from",
           "ours: mean ± std over seeds (n)", "ours - target: mean [95% CI, Student t]",
           "band", "verdict")  # fmt: skip


def rows(outcome: Outcome) -> list[tuple[str, ...]]:
    return [
        (line.claim.label, line.claim.method, line.claim.metric, target_text(line),
         line.claim.source_text(), ours_text(line), difference_text(line),
         line.claim.band_text(), line.verdict_text())
        for line in outcome.lines
    ]  # fmt: skip


def verdict_counts(outcome: Outcome) -> str:
    order = ("reproduced", "inconclusive", "not reproduced", "not run")
    counts = {v: sum(line.verdict == v for line in outcome.lines) for v in order}
    said = ", ".join(f"{counts[v]} {v}" for v in order if counts[v])
    # A table whose every line is measured at this preset (no number published for what
    # it runs) judges nothing: say so rather than print an empty list.
    return said or f"none: {len(outcome.lines)} line(s) measured, none judged at this preset"


def command_line(
    outcome: Outcome, uri: str, lines: str | None = None, data_root: str | None = None
) -> str:
    """The ``reproduce`` command that gives ``outcome`` again from the same store.

    Everything that selects runs or numbers is in it (``--workers`` and ``--warm`` change
    only the wall time, so they are left out).
    """
    words = ["python", "-m", "benchmarks", "reproduce", outcome.table.name,
             "--preset", outcome.preset, "--seeds", ",".join(map(str, outcome.seeds))]  # fmt: skip
    if lines:
        words += ["--lines", lines]
    if data_root:
        words += ["--data-root", data_root]
    words += ["--markdown", "--tracking-uri", uri]
    return shlex.join(words)


def markdown(
    outcome: Outcome, uri: str, lines: str | None = None, data_root: str | None = None,
    figure: str | None = None, provenance: str | None = None,
) -> str:
    """The table as docs/RESULTS.md carries it, with the command and store it came from
    (``provenance``: a sentence that says where its runs came from instead)."""
    table = outcome.table
    seeds = ",".join(map(str, outcome.seeds))
    if provenance is None:
        today = datetime.date.today().isoformat()
        machine = f"{platform.machine()}, {os.cpu_count()} cores"
        provenance = (f"Generated {today} on {machine} by "
                      f"`{command_line(outcome, uri, lines, data_root)}`.")  # fmt: skip
    text = [
        f"#### {table.title} (`{table.name}`)",
        "",
        f"Source: {table.source}. Preset `{outcome.preset}`, seeds {seeds}. {provenance}",
        "",
    ]
    if table.note:
        text += [table.note, ""]
    text += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    text += ["| " + " | ".join(row.replace("|", "\\|") for row in line) + " |"
             for line in rows(outcome)]  # fmt: skip
    text += ["", f"Verdicts: {verdict_counts(outcome)}."]
    if figure is not None and table.figure is not None:
        text += ["", f"![{table.figure.source}]({figure}) (its data: "
                     f"{Path(figure).with_suffix('.csv')})"]  # fmt: skip
    return "\n".join(text) + "\n"


def table_configurations(table: Table) -> set[str] | None:
    """The config hashes the table's lines run at every preset (what its shipped bundle
    may hold); None where a preset cannot be planned here (a plugin not installed): then
    nobody can say which shipped runs are the table's."""
    from benchmarks.published.claims import PRESETS

    seeds = parse_seeds(table.seeds)
    hashes: set[str] = set()
    for claim in table.claims:
        for preset in PRESETS:
            try:
                hashes |= set(plan_cells(claim_spec(claim, preset, seeds)).values())
            except ConfigError:
                return None
    return hashes


def shipped_times(table: Table) -> dict[str, list[float]]:
    """The wall seconds of the table's shipped FINISHED runs, by configuration hash, from
    their recorded start and end (empty: the table ships none)."""
    from benchmarks.store.bundles import read_bundle
    from benchmarks.store.shipped import table_bundle

    path = table_bundle(table.name)
    seconds: dict[str, list[float]] = {}
    for run in read_bundle(path).runs if path.exists() else []:
        if run["status"] == "FINISHED" and run.get("end_time"):
            seconds.setdefault(run["tags"]["mesabench.config_hash"], []).append(
                (run["end_time"] - run["start_time"]) / 1000)  # fmt: skip
    return seconds


def shipped_seconds(table: Table, preset: str,
                    times: dict[str, list[float]] | None = None) -> dict[tuple, float]:  # fmt: skip
    """The mean wall seconds of each of the table's runs at ``preset`` (keyed by
    :func:`run_key`) over its shipped runs of that configuration (``times``:
    :func:`shipped_times`, read here when not given); runs with no shipped run are
    absent."""
    seconds = shipped_times(table) if times is None else times
    if not seconds:
        return {}
    seeds = parse_seeds(table.seeds)
    out: dict[tuple, float] = {}
    for claim in table.claims:
        key = run_key(claim, preset)
        if key in out:
            continue
        try:
            hashes = set(plan_cells(claim_spec(claim, preset, seeds)).values())
        except ConfigError:  # a preset this installation cannot plan (a missing plugin)
            continue
        times_here = [t for h in hashes for t in seconds.get(h, [])]
        if times_here:
            out[key] = math.fsum(times_here) / len(times_here)
    return out


def catalog_rows(tables: Sequence[Table]) -> list[tuple[str, ...]]:
    """``reproduce --list``: each table with its lines, runs and cost per preset: the
    shipped runs' recorded times where the table ships runs of that preset, else the cost
    noted with its lines (measured when they were written, or extrapolated)."""
    out = []
    for table in tables:
        n_seeds = len(parse_seeds(table.seeds))
        times = shipped_times(table)  # the bundle read once for the three presets
        costs = []
        for preset in ("quick", "cpu", "paper"):
            measured = shipped_seconds(table, preset, times)
            known, unknown = table.cost_s(preset, n_seeds, measured)
            per_seed = table.runs_per_seed(preset)
            runs = per_seed * n_seeds
            text = f"{runs} runs, {_duration(known)}" if known else f"{runs} runs"
            if unknown:
                text += f" ({unknown} unmeasured)" if known else ", cost not measured"
            if measured:
                shipped = len(measured) * n_seeds
                text += (", shipped runs' times" if len(measured) == per_seed else
                         f", {shipped} of {runs} from shipped runs' times")  # fmt: skip
            costs.append(text)
        out.append((table.name, table.title, str(len(table.claims)), table.seeds, *costs))
    return out


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"~{max(1, round(seconds / 60))} CPU-min"
    return f"~{seconds / 3600:.1f} CPU-h"
