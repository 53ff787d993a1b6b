"""Leaderboards read back from MLflow: final metrics per configuration, statistics over seeds.

A ranked board holds only runs of one task and protocol setting (every ``task.*`` and
``protocol.*`` param equal) and of one kind (training runs, or evaluations of learners
trained on one benchmark): method settings may differ between its rows, and are shown. The
runs of any other setting are listed apart, unranked, each row saying what differs;
``--param`` picks the setting to rank. Which setting a board ranks, when several are in the
store: the benchmark's own defaults where runs have them, else the setting with the most
(method, seed) cells.

Runs that differ only by seed (same ``mesabench.config_hash``) form one row unless
``group_by`` says otherwise; a row that pools different settings says which, and counts
each seed once (a seed's runs are averaged). Runs of a method whose code differs
(``mesabench.method_code``; '' where a run recorded none) are never pooled into one row.
Each (configuration, seed, code)
counts once: of repeated FINISHED runs the latest is kept and the others are counted as
dropped. Only FINISHED runs are ranked; failed, killed, running and stale ones (RUNNING
without a heartbeat) are counted. A row whose ranked metric diverged is listed with its
diverged fraction, never ranked. Each reference row sits beside ours when the settings it
declares match the board's (its method settings against our rows of its method); otherwise
it is listed apart with what differs. The ranking direction comes from
:mod:`benchmarks.metrics.catalog`, never from a metric's name. The tracker is the only
writer of results; this module only reads them.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from operator import attrgetter

from benchmarks.catalog.references import ReferenceRow, references_for
from benchmarks.metrics import catalog as metric_catalog
from benchmarks.results.board import (
    CODE_TAG,
    COMPARED_SECTIONS,
    DEFAULTS_TAG,
    GROUP_KEYS,
    Leaderboard,
    LeaderboardError,
    LeaderboardRow,
    RunFilter,
    RunRecord,
    is_setting,
)
from benchmarks.results.multiple_tests import holm, seeds_for_power
from benchmarks.results.statistics import CONFIDENCE, PairedTest, paired_t_test
from benchmarks.store.bulk import metric_names, param_keys, plain_params
from benchmarks.store.lifecycle import is_stale
from benchmarks.store.reader import (
    RUN_LOCAL_SETTINGS,
    Only,
    StoredRun,
    StoreReader,
    TagFilter,
)

log = logging.getLogger("mesabench")

# -- reading ------------------------------------------------------------------------------
def _record(run: StoredRun) -> RunRecord:
    tags = run.tags
    return RunRecord(
        run_id=run.run_id,
        benchmark=tags.get("mesabench.benchmark", "?"),
        method=tags.get("mesabench.method", "?"),
        config_hash=tags.get("mesabench.config_hash", "?"),
        seed=int(tags.get("mesabench.seed", -1)),
        status=run.status,
        version=tags.get("mesabench.version", "?"),
        start_time=datetime.fromtimestamp((run.start_ms or 0) / 1000, tz=timezone.utc),
        params=run.params,
        tags=tags,
        metrics=run.metrics,
        stale=is_stale(run.status, tags, run.start_ms),
        code=tags.get(CODE_TAG, ""),
    )


def read_runs(
    reader: StoreReader,
    experiment_id: str,
    where: TagFilter | None = None,
    only: Only | None = None,
) -> list[RunRecord]:
    """Every active run of one experiment (benchmark), or those passing ``where`` (with
    at least what ``only`` keeps of each)."""
    return [_record(run) for run in reader.runs(experiment_id, where, only)]


def benchmarks_in_store(reader: StoreReader) -> list[str]:
    """Names of the experiments that hold runs of this suite, sorted."""
    from benchmarks.store.claims import is_claim_experiment

    names = reader.experiment_names()
    return sorted(n for n in names if n != "Default" and not is_claim_experiment(n))


# -- building -----------------------------------------------------------------------------
def default_columns(metric_names: Iterable[str], headline: Sequence[str] = ()) -> list[str]:
    """The columns a board shows by default: the benchmark's declared ``headline`` (its
    protocol's), those the runs logged. ``"a|b"`` takes the first of a, b logged;
    ``"prefix/*"`` every logged metric under the prefix. The first column ranks."""
    names = set(metric_names)
    columns: list[str] = []
    for entry in headline or GENERIC_HEADLINE:
        if entry.endswith("/*"):
            columns += sorted(n for n in names if n.startswith(entry[:-1]))
        else:
            columns += [c for c in entry.split("|") if c in names][:1]
    return columns or ["final/test_loss"]


def headline_of(benchmark: str) -> tuple[str, ...]:
    """The benchmark's declared default columns (imported here, when a board needs them,
    so that reading a store whose runs recorded theirs needs no spec and no torch)."""
    from benchmarks.catalog.installed import headline_of as declared

    return declared(benchmark)


#: Columns for a benchmark whose spec is not installed (its runs remain in the store).
GENERIC_HEADLINE = ("final/test_accuracy|final/test_loss",)


def _config_keys(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The run params whose values differ between rows: what tells them apart.

    Task and protocol settings are compared across every row (a budget that differs
    between two methods must show); a method's own settings only between rows of that
    method (another method's config has other fields).
    """
    keys: set[str] = set()
    params = [(row.method, plain_params(row.runs[0].params)) for row in rows if row.runs]
    every = set().union(*(p for _, p in params)) if params else set()
    for key in filter(is_setting, every):
        if key.startswith("method."):
            by_method: dict[str, set] = {}
            for method, p in params:
                by_method.setdefault(method, set()).add(p.get(key))
            if any(len(values) > 1 for values in by_method.values()):
                keys.add(key)
        elif len({p.get(key) for _, p in params}) > 1:
            keys.add(key)
    return sorted(keys)


def _pooled(row: LeaderboardRow) -> dict[str, list[str]]:
    """Settings whose values differ between the runs of one row."""
    out = {}
    every = set().union(*(r.params for r in row.runs))
    for key in sorted(filter(is_setting, every)):
        values = sorted({r.params.get(key, "-") for r in row.runs})
        if len(values) > 1:
            out[key] = values
    return out


def _deduplicate(runs: list[RunRecord]) -> tuple[list[RunRecord], int]:
    """One FINISHED run per (method, configuration, seed, code): the latest one started. A
    cell run again with other code is not a repeat: it goes to that code's row."""
    latest: dict[tuple[str, str, int, str], RunRecord] = {}
    for run in runs:
        key = (run.method, run.config_hash, run.seed, run.code)
        if key not in latest or run.start_time > latest[key].start_time:
            latest[key] = run
    return list(latest.values()), len(runs) - len(latest)


def resolve_setting_key(key: str, recorded: Sequence[str], flag: str) -> str:
    """``key`` as the runs recorded it: itself, or the one recorded ``section.key`` a bare
    name stands for; else :class:`LeaderboardError` naming the flag and near matches."""
    if key in recorded:
        return key
    qualified = [name for name in recorded if name.rpartition(".")[2] == key]
    if len(qualified) == 1:
        return qualified[0]
    if len(qualified) > 1:
        raise LeaderboardError(f"{flag} {key} is ambiguous; write one of {', '.join(qualified)}")
    near = difflib.get_close_matches(key, recorded, n=3) or difflib.get_close_matches(
        key, sorted({name.rpartition(".")[2] for name in recorded}), n=3
    )
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    allowed = f"{', '.join(GROUP_KEYS)} or " if flag == "--group-by" else ""
    raise LeaderboardError(f"{flag} {key}: no run recorded that setting{hint} (allowed: "
                           f"{allowed}a recorded setting such as method.inner_lr)")  # fmt: skip


def ranking_direction(metric: str) -> bool:
    """True when higher is better; a metric without a declared direction cannot rank."""
    direction = metric_catalog.direction_of(metric)
    if direction is None:
        why = (
            "is not declared in benchmarks/metrics/catalog.py"
            if not metric_catalog.is_declared(metric)
            else "is descriptive (it has no better direction)"
        )
        raise LeaderboardError(f"cannot rank by {metric}: it {why}; rank by a declared score")
    return direction == "higher"


def _settings_of(rows: Sequence[LeaderboardRow]) -> dict[str, str]:
    """The settings all rows agree on (to fill the ranked metric's words). A row's runs
    share its configuration, so one run per row is compared; the run-local ones (seed,
    device, data root) describe no metric and are left out."""
    params = [row.runs[0].params for row in rows if row.runs]
    if not params:
        return {}
    agreed = {k: v for k, v in params[0].items() if k not in RUN_LOCAL_SETTINGS}
    for other in params[1:]:
        agreed = {k: v for k, v in agreed.items() if other.get(k) == v}
    return agreed


def _place_references(
    published: list[ReferenceRow], ours: list[LeaderboardRow],
    setting: tuple[tuple[str, str], ...],
) -> tuple[list[LeaderboardRow], list[LeaderboardRow]]:
    """Each reference on its own: beside ours (ranked) when the task and protocol settings
    it declares are the board's ``setting`` and its method settings those of some row of
    ours of its method (any, where we have no row of it); else apart, with what differs."""
    beside, apart = [], []
    board = dict(setting)
    for ref in published:
        differ = ref.differences(board) if board else {}
        differ = {k: v for k, v in differ.items() if k.startswith(COMPARED_SECTIONS)}
        method_keys = {k for k in ref.settings if not k.startswith(COMPARED_SECTIONS)}
        mine = [row for row in ours if row.method == ref.method and row.runs]
        if method_keys and mine:
            each = [{k: v for k, v in ref.differences(row.runs[0].params).items()
                     if k in method_keys} for row in mine]  # fmt: skip
            if all(each):  # no row of its method matches it
                for key in sorted(set().union(*each)):
                    values = sorted({d[key][0] for d in each if key in d})
                    differ[key] = ("/".join(values), str(ref.settings[key]))
        row = LeaderboardRow(ref.method, reference=ref)
        if differ:
            row.settings_differ = differ
            apart.append(row)
        else:
            beside.append(row)
    return beside, apart


def _rows(runs: Sequence[RunRecord], group_by: Sequence[str]) -> list[LeaderboardRow]:
    """Runs grouped into rows by ``group_by`` (and a method's code: never pooled across)."""
    groups: dict[tuple[str, ...], LeaderboardRow] = {}
    if all(k in GROUP_KEYS for k in group_by):  # the usual grouping: fields, read in C
        key_of = attrgetter(*group_by, "code")
    else:
        def key_of(run: RunRecord) -> tuple[str, ...]:
            return (*(run.group_value(k) for k in group_by), run.code)
    for run in sorted(runs, key=attrgetter("start_time", "run_id")):
        key = key_of(run)
        row = groups.get(key)
        if row is None:
            row = groups[key] = LeaderboardRow(run.method)
        row.runs.append(run)
    rows = list(groups.values())
    for row in rows:
        # A grouping without the method pools methods: the row names every one it pools.
        methods = sorted({run.method for run in row.runs})
        if len(methods) > 1:
            row.method = " + ".join(methods)
    if "config_hash" not in group_by:
        for row in rows:
            row.pooled = _pooled(row)
    return rows


def ranked_setting(runs: Sequence[RunRecord]) -> tuple[tuple[str, str], ...]:
    """Which setting a board ranks: of training runs where there are any, the benchmark's
    defaults where runs have them, else the one with the most (method, seed) cells (then
    the one run most recently)."""
    pool = [r for r in runs if not r.evaluation] or list(runs)
    cells: dict[tuple, set[tuple[str, int]]] = {}
    newest: dict[tuple, datetime] = {}
    defaults: set[tuple] = set()
    for run in pool:
        cells.setdefault(run.setting, set()).add((run.method, run.seed))
        newest[run.setting] = max(newest.get(run.setting, run.start_time), run.start_time)
        if run.tags.get(DEFAULTS_TAG) == "true":
            defaults.add(run.setting)
    return max(cells, key=lambda s: (s in defaults, len(cells[s]), newest[s]))


def _differ(setting: tuple, ranked: tuple) -> dict[str, tuple[str, str]]:
    mine, theirs = dict(setting), dict(ranked)
    return {k: (mine.get(k, "-"), theirs.get(k, "-"))
            for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)}  # fmt: skip


def build_leaderboard(
    records: Sequence[RunRecord],
    benchmark: str,
    metric: str | None = None,
    group_by: Sequence[str] = ("method", "config_hash"),
    run_filter: RunFilter | None = None,
    extra_prefixes: Sequence[str] = (),
    references: bool = True,
    baseline: str | None = None,
    headline: Sequence[str] | None = None,
    spec_references: bool = True,
) -> Leaderboard:
    """Rank the FINISHED runs in ``records`` that pass ``run_filter``.

    ``baseline`` names a method: every other row gets its paired difference to that
    method's best row over the seeds both have. ``headline`` gives the default columns
    (else the benchmark's spec is consulted); ``spec_references=False`` shows only the
    built-in published rows (no spec lookup: a built-in benchmark declares none of its own).
    """
    declare_from_runs(records)
    run_filter = run_filter or RunFilter()
    recorded = sorted(param_keys([r.params for r in records if r.method != "?"]))
    if records:  # a key no run recorded would silently filter out or pool everything
        run_filter = dataclasses.replace(run_filter, params={
            resolve_setting_key(k, recorded, "--param"): v for k, v in run_filter.params.items()
        })  # fmt: skip
        group_by = tuple(k if k in GROUP_KEYS else resolve_setting_key(k, recorded, "--group-by")
                         for k in group_by)  # fmt: skip
    filtered_out = _unmatched_filter(records, run_filter, benchmark)
    excluded = {"FAILED": 0, "KILLED": 0, "RUNNING": 0, "STALE": 0}
    finished = []
    for run in records:
        if run.method == "?" or not run_filter.admits(run):
            continue  # not a method run (e.g. a sweep's parent), or filtered out
        if (run.tuning or {}).get("role") == "trial":  # chose a configuration; no result
            excluded["TUNING TRIALS"] = excluded.get("TUNING TRIALS", 0) + 1
            continue
        if run.status != "FINISHED":
            status = "STALE" if run.stale else run.status
            excluded[status] = excluded.get(status, 0) + 1
            continue
        finished.append(run)
    finished, dropped = _deduplicate(finished)
    setting = ranked_setting(finished) if finished else ()
    ours = _rows([r for r in finished if r.setting == setting], group_by)
    elsewhere = []
    for other in sorted({r.setting for r in finished} - {setting}):
        for row in _rows([r for r in finished if r.setting == other], group_by):
            row.other_setting, row.status = _differ(other, setting), "other settings"
            elsewhere.append(row)
    published = references_for(benchmark, spec_references) if references else []
    names = metric_names([r.metrics for row in ours + elsewhere for r in row.runs])
    names |= {m for ref in published for m in ref.metrics}
    columns = default_columns(names, headline if headline is not None else headline_of(benchmark))
    if metric is not None:
        columns = [metric, *[c for c in columns if c != metric]]
    for name in sorted(names):
        wanted = any(name.startswith(p) for p in extra_prefixes) and not name.endswith("_ci95")
        if wanted and name not in columns:
            columns.append(name)
    ranking = columns[0]
    higher = ranking_direction(ranking)
    beside, apart = _place_references(published, ours, setting)

    def rank_key(row: LeaderboardRow) -> tuple[float, int]:
        mean = row.stats(ranking).mean
        return (-mean if higher else mean, row.is_reference)

    ranked = [row for row in ours if row.stats(ranking).mean is not None]
    unranked = [row for row in ours if row.stats(ranking).mean is None]
    rows = sorted(ranked + [r for r in beside if r.stats(ranking).mean is not None], key=rank_key)
    apart += [r for r in beside if r.stats(ranking).mean is None]
    for row in rows:
        row.status = "reference" if row.is_reference else "ranked"
    for row in unranked:
        row.status = "diverged" if row.diverged(ranking) else "missing"
    for row in apart:
        row.status = "reference, settings differ"
    config_keys = [k for k in _config_keys(ours) if k not in group_by]
    board = Leaderboard(
        benchmark, ranking, higher, columns, rows, excluded, config_keys,
        unranked=unranked, apart=apart, duplicates_dropped=dropped,
        metric_words=metric_catalog.describe(ranking, _settings_of(ours)),
        elsewhere=elsewhere, setting=setting, filtered_out=filtered_out,
    )  # fmt: skip
    mark_ties_with_best(board)
    if baseline is not None:
        compare_to_baseline(board, baseline)
    return board


def mark_ties_with_best(board: Leaderboard) -> None:
    """Mark the ranked rows of ours that are not significantly worse than the best one:
    each paired with the best over their shared seeds (two-sided paired t-test, Holm over
    the board's rows, 5%), so that a reader does not take rank 1 of 5 for a win where no
    difference is significant. A row sharing fewer than two seeds with the best is left
    unmarked (nothing can be said)."""
    ranked = [row for row in board.rows if not row.is_reference]
    if len(ranked) < 2:
        return
    best = ranked[0].by_seed(board.metric)
    tested = []
    for row in ranked[1:]:
        test, _ = _paired(row.by_seed(board.metric), best)
        if test.p_value is not None:
            tested.append((row, test.p_value))
    for (row, _), adjusted in zip(tested, holm([p for _, p in tested]), strict=True):
        row.tied_with_best = adjusted >= 1.0 - CONFIDENCE


def _paired(mine: dict[int, float], reference: dict[int, float]) -> tuple[PairedTest, list]:
    """The paired t-test of a row's per-seed values against a reference row's, over the
    seeds both have, and those differences (row - reference)."""
    pairs = sorted(set(mine) & set(reference))
    test = paired_t_test([mine[s] for s in pairs], [reference[s] for s in pairs])
    return test, [mine[s] - reference[s] for s in pairs]


def _unmatched_filter(records: Sequence[RunRecord], run_filter: RunFilter, benchmark: str) -> str:
    """Why ``run_filter``'s params admit no run of ``benchmark`` (it has some), naming the
    values recorded; empty when they admit one (or there are no params or no runs)."""
    runs = [r for r in records if r.method != "?"]
    if not run_filter.params or not runs:
        return ""
    params_only = RunFilter(params=run_filter.params)
    if any(params_only.admits(r) for r in runs):
        return ""
    for key, value in run_filter.params.items():
        if all(r.params.get(key) != value for r in runs):
            seen = sorted({r.params.get(key, "-") for r in runs})
            shown = ", ".join(seen[:10]) + (", ..." if len(seen) > 10 else "")
            return f"--param {key}={value}: no run of {benchmark} has it (recorded: {shown})"
    asked = ", ".join(f"{k}={v}" for k, v in run_filter.params.items())
    return f"--param {asked}: no run of {benchmark} has all of these at once"


def compare_to_baseline(board: Leaderboard, method: str) -> None:
    """Pair every row with one ranked row of the baseline over the seeds both have.

    ``method`` is a method (``maml``) or a method and a config hash prefix
    (``maml@3f2a``: that row). Of a method's rows, the one sharing the most seeds with the
    other ranked rows is taken (the best ranked among equals): its best row may share none
    (a sweep's grid over seeds 10-12 beside a default row over 0-2) and pair with nothing.
    """
    name, _, code = method.partition("@")
    candidates = [row for row in board.rows if not row.is_reference and row.method == name
                  and (not code or row.runs[0].config_hash.startswith(code))]  # fmt: skip
    if not candidates:
        have = sorted({row.method for row in board.ours})
        rows_of = [r.runs[0].config_hash[:8] for r in board.rows
                   if not r.is_reference and r.method == name]  # fmt: skip
        which = f"; its rows: {', '.join(f'{name}@{c}' for c in rows_of)}" if rows_of else ""
        raise LeaderboardError(
            f"--baseline {method}: no ranked row of that method on {board.benchmark}{which}; "
            f"methods here: {', '.join(have) or 'none'}"
        )
    others = [row for row in board.ours if row.method != name]

    def shared(row: LeaderboardRow) -> int:
        seeds = set(row.by_seed(board.metric))
        return sum(len(seeds & set(o.by_seed(board.metric))) for o in others)

    base = max(candidates, key=shared)  # max keeps the first (best ranked) among equals
    board.baseline = base
    reference = base.by_seed(board.metric)
    for row in board.ours:
        if row is base:
            continue
        row.versus_baseline, differences = _paired(row.by_seed(board.metric), reference)
        row.seeds_for_power = seeds_for_power(differences)
    # Many rows, many tests: each p-value adjusted for the others (Holm), so that one of
    # several comparisons is not read as if it stood alone.
    tested = [row for row in board.ours if row.versus_baseline is not None]
    for row, adjusted in zip(tested, holm([r.versus_baseline.p_value for r in tested]),
                             strict=True):  # fmt: skip
        row.versus_baseline_holm = adjusted


def declare_from_runs(records: Sequence[RunRecord]) -> None:
    """Declare the metrics the runs' protocols declared (recorded with each run). A run
    recorded before runs kept them: the installed protocols declare theirs (imported here,
    only then, as they bring torch)."""
    told = {r.tags.get(metric_catalog.RECORDED_TAG) for r in records}
    missing = None in told
    for text in told - {None}:
        missing |= not metric_catalog.declare_recorded(text)
    if missing:
        import benchmarks.protocols  # noqa: F401  (declares every built-in protocol's metrics)


def recorded_headline(records: Sequence[RunRecord]) -> tuple[str, ...] | None:
    """The default columns the newest run recorded (``mesabench.headline``), if any."""
    for run in sorted(records, key=lambda r: r.start_time, reverse=True):
        recorded = run.tags.get("mesabench.headline")
        if recorded:
            try:
                return tuple(json.loads(recorded))
            except ValueError:
                continue
    return None


def leaderboard_from_store(
    reader: StoreReader, benchmark: str, where: TagFilter | None = None, **options
) -> Leaderboard:
    """The leaderboard of ``benchmark`` from the store ``reader`` reads (only its runs that
    pass ``where``, if given). Runs that recorded their headline and come from a built-in
    benchmark need no spec lookup (no torch)."""
    experiment_id = reader.experiment_id(benchmark)
    # What a board reads of each run: the suite's tags and those a filter names; the
    # run-local params only where a filter or the grouping uses them.
    run_filter = options.get("run_filter") or RunFilter()
    asked = {*run_filter.params, *options.get("group_by", ())}
    only = Only(frozenset(run_filter.tags), run_local=bool(asked & set(RUN_LOCAL_SETTINGS)))
    records = [] if experiment_id is None else read_runs(reader, experiment_id, where, only)
    builtin = bool(records) and all(
        r.tags.get("mesabench.benchmark_source") == "built-in" for r in records
    )
    headline = recorded_headline(records) if builtin else None
    return build_leaderboard(
        records, benchmark, headline=headline, spec_references=not builtin, **options
    )
