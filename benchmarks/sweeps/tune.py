"""``tune``: every method the same number of trials, selected on validation, then run over
the final seeds.

Each method declares the settings it may be tuned on (``Method.search_space``: a plugin
declares its own). Optuna's TPE sampler proposes trial k of a method from the values of
its trials before k, with a generator seeded by (the tune's seed, k): the same store gives
the same proposals, so an interrupted tune started again recomputes the same trial k and
finds its runs FINISHED instead of running them twice. A trial is an ordinary sweep cell
(exclusive, resumable, recorded) at the tuning seeds, which the final seeds may not share;
its value is the validation metric at the iteration the run selected (the weights it
tests), averaged over the tuning seeds. Test metrics are never read. The methods' trials k
run side by side; when every method has had its trials, each method's best trial (ties:
the earlier) is run over the final seeds.

Every run of a tune records its role (``RunPlan.tuning``, part of its identity): a trial
(never ranked on a board), or the selected configuration with the budget, the space, the
metric and the trial it came from, which the board shows with its row ("tuned: 20 trials,
selected on val/loss"). So a tuned row is never pooled with an untuned one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from benchmarks.sweeps.backends import LocalBackend
from benchmarks.sweeps.spec import SweepSpec
from benchmarks.sweeps.sweep import run_sweeps
from mesabench_core import ConfigError
from methods.api import Choice, FloatRange, IntRange, Space

log = logging.getLogger("mesabench")

#: The seeds trials train at by default: apart from the usual final seeds 0, 1, 2, ...
TUNE_SEEDS = (100,)


@dataclass(frozen=True)
class TuneSpec:
    benchmark: str
    methods: tuple[str, ...]
    trials: int
    seeds: tuple[int, ...]  # the final runs'
    tune_seeds: tuple[int, ...] = TUNE_SEEDS
    settings: tuple[tuple[str, str], ...] = ()  # --set, every run
    preset: str | None = None
    device: str = "cpu"
    data_root: str | None = None
    select: str | None = None  # a val/ metric; None: the protocol's
    sampler_seed: int = 0

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ConfigError(f"--trials must be >= 1 (got {self.trials})")
        shared = sorted(set(self.seeds) & set(self.tune_seeds))
        if shared:
            raise ConfigError(f"--seeds and --tune-seeds share {shared}: the final runs must "
                              "not reuse the runs their configuration was selected on")  # fmt: skip


@dataclass
class MethodTune:
    method: str
    space: dict[str, Space]
    tune_id: str
    #: Trial k's settings and value (None: its runs failed), in order.
    trials: list[tuple[dict[str, str], float | None]] = field(default_factory=list)
    selected: int | None = None


@dataclass
class TuneResult:
    metric: str
    higher: bool
    methods: list[MethodTune]
    interrupted: bool = False
    failed: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 130 if self.interrupted else (1 if self.failed else 0)


# -- what is searched, and on what ---------------------------------------------------------------
def selection_metric(spec: TuneSpec) -> tuple[str, bool]:
    """The validation metric trials are compared on, and whether higher is better."""
    from benchmarks.catalog.installed import benchmark_spec
    from benchmarks.metrics import catalog as metric_catalog
    from methods.common.losses import is_classification

    bench = benchmark_spec(spec.benchmark)
    if bench.protocol_name != "episodic":
        raise ConfigError(
            f"tune selects on validation tasks; {spec.benchmark}'s protocol "
            f"({bench.protocol_name}) has none (allowed: episodic benchmarks)")  # fmt: skip
    # What every episodic validation logs (protocols/episodic.py): its loss, and its
    # accuracy on classification tasks. Checked here, before a trial runs.
    classification = is_classification(bench.task.build().problem.loss)
    logged = ("val/accuracy", "val/loss") if classification else ("val/loss",)
    metric = spec.select or logged[0]
    if not metric.startswith("val/"):
        raise ConfigError(f"--select {metric}: tune selects on validation metrics only "
                          f"({', '.join(logged)}), never on test metrics")  # fmt: skip
    if metric not in logged:
        raise ConfigError(f"--select {metric}: {spec.benchmark}'s validation does not log it "
                          f"(allowed: {', '.join(logged)})")  # fmt: skip
    return metric, metric_catalog.direction_of(metric) == "higher"


def method_space(spec: TuneSpec, method: str) -> dict[str, Space]:
    """The method's declared space for this benchmark, less the fields ``--set`` fixes."""
    from benchmarks.catalog.installed import method_entry
    from benchmarks.planning.plan import plan_run

    plan = plan_run(method, spec.benchmark, spec.tune_seeds[0], dict(spec.settings),
                    spec.device, spec.preset, data_root=spec.data_root)  # fmt: skip
    space = method_entry(method).cls.search_space(plan.method)
    fixed = {key.removeprefix("method.") for key, _ in spec.settings}
    space = {name: s for name, s in space.items() if name not in fixed}
    if not space:
        raise ConfigError(f"tune: method {method!r} declares no search space (Method."
                          "search_space), or --set fixes all of it")  # fmt: skip
    return space


def space_text(space: Mapping[str, Space]) -> dict[str, str]:
    def one(s: Space) -> str:
        if isinstance(s, Choice):
            return "one of " + ", ".join(map(str, s.values))
        return f"{s.low:g} to {s.high:g}{' (log)' if s.log else ''}"

    return {name: one(s) for name, s in sorted(space.items())}


def tune_id(spec: TuneSpec, method: str, space: Mapping[str, Space], metric: str) -> str:
    """Names one method's trials: the same tune of that method finds them again."""
    body = json.dumps({"benchmark": spec.benchmark, "method": method, "trials": spec.trials,
                       "tune_seeds": spec.tune_seeds, "settings": spec.settings,
                       "preset": spec.preset, "select": metric, "space": space_text(space),
                       "sampler_seed": spec.sampler_seed}, sort_keys=True)  # fmt: skip
    return hashlib.sha256(body.encode()).hexdigest()[:12]


# -- proposals -------------------------------------------------------------------------------------
def _distributions(space: Mapping[str, Space]) -> dict:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out = {}
    for name, s in sorted(space.items()):
        if isinstance(s, FloatRange):
            out[name] = FloatDistribution(s.low, s.high, log=s.log)
        elif isinstance(s, IntRange):
            out[name] = IntDistribution(s.low, s.high, log=s.log)
        else:
            out[name] = CategoricalDistribution(list(s.values))
    return out


def _setting_text(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def propose(space: Mapping[str, Space], history: Sequence[tuple[dict, float | None]],
            higher: bool, seed: int) -> dict[str, object]:  # fmt: skip
    """Trial ``len(history)``'s values: Optuna's TPE sampler (seeded by ``seed``) given the
    earlier trials' values and their outcomes (None: failed)."""
    import optuna
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = _distributions(space)
    study = optuna.create_study(direction="maximize" if higher else "minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed))  # fmt: skip
    for values, outcome in history:
        state = TrialState.COMPLETE if outcome is not None else TrialState.FAIL
        study.add_trial(create_trial(params=values, distributions=distributions,
                                     value=outcome, state=state))  # fmt: skip
    return study.ask(distributions).params


def _trial_seed(sampler_seed: int, k: int) -> int:
    digest = hashlib.sha256(f"{sampler_seed}/{k}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


# -- running ---------------------------------------------------------------------------------------
def _overrides(spec: TuneSpec, values: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    return (*spec.settings, *((f"method.{k}", _setting_text(v)) for k, v in sorted(values.items())))


def _trial_spec(spec: TuneSpec, tune: MethodTune, k: int,
                values: Mapping[str, object]) -> SweepSpec:  # fmt: skip
    role = json.dumps({"role": "trial", "tune": tune.tune_id, "trial": k}, sort_keys=True)
    return SweepSpec(spec.benchmark, (tune.method,), spec.tune_seeds,
                     settings=_overrides(spec, values), preset=spec.preset, device=spec.device,
                     data_root=spec.data_root, origin=f"tune of {tune.method}",
                     tuning=role)  # fmt: skip


def _final_spec(spec: TuneSpec, tune: MethodTune, metric: str) -> SweepSpec:
    k = tune.selected
    values, value = tune.trials[k]  # type: ignore[index]
    role = json.dumps({"role": "selected", "tune": tune.tune_id, "trials": spec.trials,
                       "selected_on": metric, "trial": k, "validation": value,
                       "tune_seeds": list(spec.tune_seeds), "space": space_text(tune.space)},
                      sort_keys=True)  # fmt: skip
    return SweepSpec(spec.benchmark, (tune.method,), spec.seeds,
                     settings=_overrides(spec, values), preset=spec.preset,
                     device=spec.device, data_root=spec.data_root,
                     origin=f"tune of {tune.method}", tuning=role)  # fmt: skip


def trial_value(tracker, sweep: SweepSpec, metric: str) -> float | None:
    """The mean over the trial's seeds of ``metric`` at the iteration each run selected
    (``final/best_iteration``); None unless every seed has a FINISHED run with a finite
    validation (a failed or diverged trial)."""
    from benchmarks.store.claims import finished_run_of
    from benchmarks.sweeps.spec import plan_cells

    values = []
    for cell, config_hash in plan_cells(sweep).items():
        run_id = finished_run_of(tracker, cell.method, sweep.benchmark, config_hash, cell.seed)
        if run_id is None:
            return None
        run = tracker.client.get_run(run_id)
        chosen = run.data.metrics.get("final/best_iteration")
        history = {m.step: m.value for m in tracker.client.get_metric_history(run_id, metric)}
        if not history:
            raise ConfigError(f"tune: run {run_id} logged no {metric} (--select: a metric "
                              "its validation logs)")  # fmt: skip
        if chosen is None or int(chosen) not in history:
            return None  # no validation was finite: the trial diverged
        values.append(history[int(chosen)])
    mean = math.fsum(values) / len(values)
    return mean if math.isfinite(mean) else None


def run_tune(spec: TuneSpec, tracker, workers: int = 1,
             progress: Callable[[str], None] | None = None,
             warm: bool = False) -> TuneResult:  # fmt: skip
    say = progress or (lambda line: log.info(line))
    metric, higher = selection_metric(spec)
    tunes = []
    for method in spec.methods:
        space = method_space(spec, method)
        tunes.append(MethodTune(method, space, tune_id(spec, method, space, metric)))
    result = TuneResult(metric, higher, tunes)
    # One pool for every round: with ``warm``, one launcher for all the trials' cells.
    with LocalBackend(workers, warm) as pool:
        try:
            _run_trials(spec, tracker, tunes, result, pool, say)
            if result.interrupted:
                return result
            _run_finals(spec, tracker, tunes, result, pool, say)
        except KeyboardInterrupt:
            # Ctrl-C outside a running sweep (between two sweeps' starts, while a trial's
            # value is read): what finished is in the store, and a started sweep was closed
            # KILLED; resumable as any interrupted round.
            result.interrupted = True
            say("tune interrupted; the same command goes on")
    return result


def _run_trials(spec: TuneSpec, tracker, tunes: list[MethodTune], result: TuneResult,
                pool: LocalBackend, say: Callable[[str], None]) -> None:  # fmt: skip
    metric, higher = result.metric, result.higher
    for k in range(spec.trials):
        sweeps = []
        for tune in tunes:
            values = propose(tune.space, tune.trials, higher, _trial_seed(spec.sampler_seed, k))
            sweeps.append((tune, values, _trial_spec(spec, tune, k, values)))
        outcomes = run_sweeps([s for _, _, s in sweeps], tracker, pool=pool,
                              progress=lambda line: None)  # fmt: skip
        # A cell stopped on its own (SIGTERM) is as unfinished as an interrupted tune: its
        # value must not be taken as a failure that later proposals would build on.
        if any(o.interrupted or o.killed for o in outcomes):
            result.interrupted = True
            say(f"tune interrupted in trial {k + 1} of {spec.trials}; the same command goes on")
            return
        for tune, values, sweep in sweeps:
            value = trial_value(tracker, sweep, metric)
            tune.trials.append((values, value))
            shown = ", ".join(f"{n}={_setting_text(v)}" for n, v in sorted(values.items()))
            outcome = "failed" if value is None else f"{metric} {value:.6g}"
            say(f"trial {k + 1}/{spec.trials} {tune.method}: {shown}: {outcome}")


def _run_finals(spec: TuneSpec, tracker, tunes: list[MethodTune], result: TuneResult,
                pool: LocalBackend, say: Callable[[str], None]) -> None:  # fmt: skip
    metric, higher = result.metric, result.higher
    finals = []
    for tune in tunes:
        scored = [(v, i) for i, (_, v) in enumerate(tune.trials) if v is not None]
        if not scored:
            result.failed.append(f"{tune.method}: every trial failed")
            continue
        best = max(scored, key=lambda p: (p[0] if higher else -p[0], -p[1]))
        tune.selected = best[1]
        say(f"selected for {tune.method}: trial {best[1] + 1} ({metric} {best[0]:.6g})")
        finals.append(_final_spec(spec, tune, metric))
    outcomes = run_sweeps(finals, tracker, pool=pool, progress=say)
    result.interrupted = any(o.interrupted for o in outcomes)
    result.failed += [f"{s.methods[0]}: {len(o.failed)} final run(s) failed"
                      for s, o in zip(finals, outcomes, strict=True) if o.failed]  # fmt: skip
