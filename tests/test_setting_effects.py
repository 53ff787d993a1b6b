"""Every setting of every built-in method and protocol does what it says: set to a second
value, the run's behaviour (what it measured and kept) changes; a setting that only changes
speed leaves the numbers equal; one that would do nothing is refused. A field added to any
built-in config without a line here fails the first test, so no setting joins unchecked.

The MAML family and the episodic protocol have a test per setting; every other family runs
its settings in one test that shares the family's base run (a run of a second each)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from benchmarks.protocols.episodic import EpisodicConfig
from benchmarks.running.setting_effects import setting_effect
from mesabench_core import ConfigError
from methods.gradient.maml import MAMLConfig

#: A run of a second: every record, validation and checkpoint happens at least twice.
TINY = {
    "iterations": "3",
    "meta_batch": "4",
    "val_every": "2",
    "val_tasks": "4",
    "test_tasks": "8",
    "eval_chunk": "8",
    "log_every": "1",
    "checkpoint_every": "2",
}
#: setting -> (its second value, the method whose runs it acts in, extra base settings,
#: what is expected: "changes", "speed only" or "refused").
METHOD = {
    "network": ("linear", "maml", {}, "changes"),
    "hidden": ("16,16", "maml", {}, "changes"),
    "channels": ("8", "maml", {"omniglot": "yes"}, "changes"),
    "inner_lr": ("0.02", "maml", {}, "changes"),
    "inner_steps": ("2", "maml", {}, "changes"),
    "test_inner_steps": ("5", "maml", {}, "refused"),
    "first_order": ("true", "maml", {}, "changes"),
    # One inner step has no second-order term in the rates' gradient: two show the order.
    "modulation_first_order": ("true", "metasgd", {"inner_steps": "2"}, "changes"),
    "adapt": ("head", "maml", {}, "changes"),
    "modulation": ("learned_rates", "maml", {}, "changes"),
    "rate_granularity": ("tensor", "metasgd", {}, "changes"),
    "mask_init": ("0.25", "sparse_maml", {}, "changes"),
    "outer_lr": ("0.002", "maml", {}, "changes"),
    "modulation_lr": ("0.01", "metasgd", {}, "changes"),
    "grad_clip": ("0.001", "maml", {}, "changes"),
    "task_batching": ("loop", "maml", {}, "speed only"),
    "msl_iterations": ("2", "maml", {"inner_steps": "2"}, "changes"),
}
PROTOCOL = {
    "precision": ("bf16", "changes"),
    "compile": ("eager", "speed only"),
    "iterations": ("4", "changes"),
    "meta_batch": ("5", "changes"),
    "val_every": ("1", "changes"),
    "val_tasks": ("6", "changes"),
    "test_tasks": ("6", "changes"),
    "eval_steps": ("1,5", "changes"),
    "eval_chunk": ("3", "speed only"),
    "select_best": ("false", "changes"),
    "log_every": ("2", "changes"),
    "checkpoint_every": ("1", "changes"),
    "test_seed": ("7", "changes"),
    "val_seed": ("7", "changes"),
}


def test_every_setting_of_the_maml_family_and_the_episodic_protocol_has_a_line():
    assert sorted(f.name for f in dataclasses.fields(MAMLConfig)) == sorted(METHOD)
    assert sorted(f.name for f in dataclasses.fields(EpisodicConfig)) == sorted(PROTOCOL)


def _check(method, key, value, expected, base, data_root=None, benchmark="sinusoid-5shot"):
    if expected == "refused":
        with pytest.raises(ConfigError, match=key):
            setting_effect(method, benchmark, base, key, value, data_root)
        return
    wrong = setting_effect(method, benchmark, base, key, value, data_root,
                           speed_only=expected == "speed only")  # fmt: skip
    assert wrong is None, wrong


@pytest.mark.parametrize("key", sorted(k for k, v in METHOD.items() if "omniglot" not in v[2]))
def test_each_maml_family_setting_changes_the_run(key):
    value, method, extra, expected = METHOD[key]
    _check(method, key, value, expected, {**TINY, **extra})


@pytest.mark.slow  # Conv-4 runs on generated Omniglot: with the long checks
def test_the_conv4_width_changes_the_run(data_root):
    """The MAML family's and the learn2learn peer's ``channels`` (the one setting they read
    only on images)."""
    from tests.image_fixtures import write_omniglot

    write_omniglot(data_root)
    value, method, _, expected = METHOD["channels"]
    _check(method, "channels", value, expected, {**TINY, **CONV4_TINY}, str(data_root), OMNIGLOT)
    assert family_errors(_families()["L2LMAMLConfig"], str(data_root), conv4=True) == []


@pytest.mark.parametrize("key", sorted(PROTOCOL))
def test_each_episodic_protocol_setting_changes_the_run(key):
    value, expected = PROTOCOL[key]
    _check("maml", key, value, expected, TINY)


def test_a_setting_that_changes_nothing_is_caught():
    """The check itself can fail: a setting the run never reads (mask_init under a fixed
    rate) is reported, and so is a 'speed only' one that changes the numbers."""
    wrong = setting_effect("maml", "sinusoid-5shot", TINY, "mask_init", "0.25")
    assert wrong and "changed nothing" in wrong
    wrong = setting_effect("maml", "sinusoid-5shot", TINY, "inner_lr", "0.02", speed_only=True)
    assert wrong and "changed the numbers" in wrong


def test_undefined_metrics_and_a_phases_timings_are_no_change():
    """A metric undefined (NaN) in both runs is the same in both (else every run with one
    would pass as changed, and no line could fail); a phase's own timings (an online run's
    pre-training) measure the machine and are left out, as the run's own are."""
    from benchmarks.metrics.catalog import measures_the_machine
    from benchmarks.running.setting_effects import Behaviour, judged

    def made(value: float, learner: str = "d") -> Behaviour:
        return Behaviour({"final/boundary_precision": value}, {}, learner)

    assert judged(made(math.nan), made(math.nan), "x=1", "here") is not None
    assert judged(made(math.nan), made(0.5), "x=1", "here") is None
    assert judged(made(math.nan), made(math.nan, "e"), "x=1", "here") is None
    assert measures_the_machine("pretrain/final/train_time_s")
    assert measures_the_machine("pretrain/final/peak_rss_mib")
    assert not measures_the_machine("pretrain/final/test_accuracy")


# -- every other family: one test each, its settings against one shared base run ---------
@dataclasses.dataclass(frozen=True)
class Line:
    """A setting's second value, what it should do, and where it acts: another method of
    the family (whose defaults switch on what the setting modulates), settings beside it,
    another benchmark."""

    value: str
    expected: str = "changes"
    method: str | None = None
    extra: tuple[tuple[str, str], ...] = ()
    benchmark: str | None = None


@dataclasses.dataclass(frozen=True)
class Family:
    config: type
    method: str
    benchmark: str
    base: tuple[tuple[str, str], ...]
    lines: dict[str, Line]


def _pairs(**settings: str) -> tuple[tuple[str, str], ...]:
    return tuple(settings.items())


#: The continual stream of tests/helpers.py (CONTINUAL_TINY) and the OSAKA run (OSAKA_TINY).
STREAM = _pairs(tasks="3", train_per_task="20", test_per_task="60", log_every="1")
#: A-GEM projects a step only where its memory disagrees with it: ten steps a task.
LONGER_STREAM = _pairs(**{**dict(STREAM), "train_per_task": "100"})
OSAKA = _pairs(steps="30", pretrain_iterations="4", channels="8", pretrain_val_every="2",
               pretrain_val_tasks="4", pretrain_test_tasks="4", pretrain_meta_batch="2",
               log_every="10", checkpoint_every="10", pretrain_classes="20",
               val_classes="10")  # fmt: skip
#: Smaller still here (~2 CPU-s a run, ~8 at OSAKA_TINY's size): ten stream steps.
OSAKA_SMALL = _pairs(**{**dict(OSAKA), "steps": "10", "pretrain_iterations": "2",
                        "channels": "4"})  # fmt: skip
#: In-context runs: a few iterations, small analyses (each analysis still runs whole).
ICL = _pairs(**{**TINY, "analysis_tasks": "64"})
_ANALYSIS = Line("32")
#: The reference algorithms of causal sequences run no analysis that draws tasks.
_NO_ANALYSIS = Line("32", "refused")
#: Conv-4 lines run on generated Omniglot with the long checks (the conv4 width test), in
#: runs of a few small Conv-4 steps (the MAML family's own line there uses the same).
OMNIGLOT = "omniglot-5w1s"
CONV4_TINY = {"val_classes": "6", "meta_batch": "2", "test_tasks": "4", "eval_chunk": "4",
              "val_tasks": "2", "channels": "4"}  # fmt: skip
#: Learners made to fail a setting's second value in an obvious way: a gradient clipped
#: this small stops what it clips.
_CLIP = Line("0.0001")


def _families() -> dict[str, Family]:
    from benchmarks.protocols.continual import ContinualConfig
    from benchmarks.protocols.online import OnlineConfig
    from methods.continual.baselines import ReplaySGDConfig
    from methods.continual.lamaml import LaMAMLConfig
    from methods.continual.online import OnlineMetaConfig
    from methods.in_context.references import GDConfig, RidgeConfig
    from methods.in_context.regression import LSAConfig
    from methods.in_context.sequence import (
        AutoregressiveGDConfig,
        LeastSquaresConfig,
        SequenceConfig,
    )
    from methods.in_context.ssm import GDSSMConfig, RecurrentConfig, S5Config
    from methods.peers.avalanche import AvalancheConfig
    from methods.peers.l2l import L2LMAMLConfig

    sparse, two = "sparse_lamaml", _pairs(layers="2")
    families = [
        Family(ReplaySGDConfig, "er", "mnist-rotations", STREAM, {
            "hidden": Line("50,50"), "lr": Line("0.1"), "buffer_size": Line("5"),
            "replay_batch": Line("3"), "step_batch": Line("1")}),
        Family(LaMAMLConfig, "lamaml", "mnist-rotations", STREAM, {
            "hidden": Line("50,50"), "glances": Line("2"), "replay_batch": Line("3"),
            "buffer_size": Line("5"), "modulation": Line("fixed"), "rate_init": Line("0.3"),
            "fixed_rate": Line("0.2", method=sparse), "mask_init": Line("0.5", method=sparse),
            "mask_init_mode": Line("centred", method=sparse), "modulation_lr": Line("0.1"),
            "modulation_optimizer": Line("adam"), "learn_modulation": Line("false"),
            "grad_clip": Line("0.01")}),
        # On the stream's batches, not one sample a step (the benchmark's GEM and MER
        # defaults, the MER code's, which make a run ten times longer).
        Family(AvalancheConfig, "agem", "mnist-rotations", _pairs(
                **{**dict(LONGER_STREAM), "train_batch": "0"}), {
            "strategy": Line("naive"), "hidden": Line("50,50"), "lr": Line("0.1"),
            "patterns_per_task": Line("5"), "memory_strength": Line("2.0", method="gem"),
            "agem_sample_size": Line("5"), "mer_buffer": Line("5", method="mer"),
            "mer_steps": Line("2", method="mer"), "mer_beta": Line("0.3", method="mer"),
            "mer_gamma": Line("0.5", method="mer"), "ewc_lambda": Line("10", method="ewc"),
            "mer_replay": Line("3", method="mer"), "train_batch": Line("5")}),
        Family(ContinualConfig, "er", "mnist-rotations", STREAM, {
            "precision": Line("bf16"), "compile": Line("eager", "refused"),  # none compiles
            "batch_size": Line("5"), "epochs": Line("2"), "eval_batch": Line("7", "speed only"),
            "log_every": Line("2"), "evaluate": Line("metrics")}),
        Family(OnlineMetaConfig, "cmaml", "osaka-omniglot-p0.9", OSAKA_SMALL, {
            # The MAML family's settings, as C-MAML's pre-training and stream use them.
            "network": Line("linear", "refused"),  # images only: an MLP cannot take them
            "hidden": Line("16,16", "refused"),  # read only by an MLP
            "channels": Line("8"), "inner_lr": Line("0.02"), "inner_steps": Line("3"),
            "test_inner_steps": Line("5", "refused"), "first_order": Line("true"),
            "modulation_first_order": Line("true", extra=_pairs(inner_steps="2")),
            "adapt": Line("head"), "modulation": Line("fixed"),
            "rate_granularity": Line("scalar"), "mask_init": Line("0.25", method="sparse_cmaml"),
            "outer_lr": Line("0.002"), "modulation_lr": Line("0.01"), "grad_clip": Line("0.001"),
            "task_batching": Line("loop", "speed only"),
            "msl_iterations": Line("2", extra=_pairs(inner_steps="2")),
            "pretrain": Line("false"),
            "fast_adaptation": Line("false", extra=_pairs(slow_update="adam")),
            "slow_update": Line("adam"), "online_lr": Line("0.01"),
            "boundary_threshold": Line("0.01", extra=_pairs(steps="30")),  # one is detected
            "loss_weight": Line("1.0"),
            "prolonged": Line("true"),
            "buffer_batches": Line("2", extra=_pairs(prolonged="true"))}),
        Family(OnlineConfig, "cmaml", "osaka-omniglot-p0.9", OSAKA_SMALL, {
            "precision": Line("bf16"), "compile": Line("eager", "refused"),  # cmaml: none
            "pretrain_iterations": Line("3"), "pretrain_meta_batch": Line("3"),
            "pretrain_val_every": Line("1"), "pretrain_val_tasks": Line("3"),
            "pretrain_test_tasks": Line("3"), "log_every": Line("5"),
            "checkpoint_every": Line("5")}),
        Family(GDSSMConfig, "gdssm", "linreg-icl", ICL, {
            "analysis_tasks": _ANALYSIS, "layers": Line("2"), "embed": Line("8"),
            "head": Line("mlp"), "head_width": Line("8", extra=_pairs(head="mlp")),
            "init_std": Line("0.1"), "lr": Line("0.01"), "recurrent_lr": Line("0.01"),
            "lr_schedule": Line("cosine"), "grad_clip": _CLIP, "construction": Line("gd")}),
        Family(RecurrentConfig, "lstm", "linreg-icl", ICL, {
            "analysis_tasks": _ANALYSIS, "hidden": Line("16"), "layers": Line("2"),
            "lr": Line("0.01"), "grad_clip": _CLIP, "input_tokens": Line("pairs")}),
        Family(S5Config, "s5", "linreg-icl", ICL, {
            "analysis_tasks": _ANALYSIS, "hidden": Line("16"), "layers": Line("2"),
            "lr": Line("0.01"), "grad_clip": _CLIP, "input_tokens": Line("pairs"),
            "block": Line("gelu")}),
        Family(LSAConfig, "lsa", "linreg-icl", ICL, {
            "analysis_tasks": _ANALYSIS, "layers": Line("2"), "heads": Line("2"),
            "tied": Line("true", extra=two), "softmax": Line("true"),
            "first_layer": Line("softmax", extra=two), "layernorm": Line("true"),
            "mlp": Line("8"), "clip": Line("0.5"), "embed": Line("8"),
            "token_embed": Line("8"), "dampening": Line("0.5"), "init_std": Line("0.1"),
            "lr": Line("0.01"), "grad_clip": _CLIP, "construction": Line("gd"),
            "copy_scale": Line("5", method="copy_gd", benchmark="linreg-icl-interleaved"),
            "align_rates": Line("0.1"), "repeat_dampenings": Line("0.6"),
            "twin_control": Line("true"),
            "align_gd_etas": Line("1.0"), "align_gdpp_etas": Line("1.0"),
            # GD++'s transform acts from its second step on: two layers, two steps.
            "align_gdpp_gammas": Line("0.1", extra=_pairs(align_gdpp_etas="1.0", layers="2"))}),
        Family(GDConfig, "gd", "linreg-icl", ICL, {
            "analysis_tasks": _ANALYSIS, "steps": Line("2"),
            "lr": Line("0.1", extra=_pairs(steps="2")),
            "tied": Line("true", extra=_pairs(steps="2")), "eta": Line("0.1"),
            "line_search": Line("true")}),
        Family(RidgeConfig, "ridge", "linreg-icl", ICL, {
            "analysis_tasks": _ANALYSIS, "lam": Line("0.5")}),
        Family(SequenceConfig, "mesa", "lindyn", ICL, {
            "analysis_tasks": _ANALYSIS, "mixer": Line("linear"), "layers": Line("2"),
            "first_layer": Line("softmax", extra=two), "mesa_form": Line("chunked", "speed only"),
            "heads": Line("2"), "tokens": Line("raw"), "embed": Line("8"),
            "layernorm": Line("true"), "repurpose": Line("true"), "lam": Line("0.5"),
            "sensitivity": Line("true", method="causal_softmax"),
            "init_std": Line("0.1"), "lr": Line("0.01"), "grad_clip": _CLIP}),
        Family(LeastSquaresConfig, "ar_least_squares", "lindyn", _pairs(**TINY), {
            "analysis_tasks": _NO_ANALYSIS, "lam": Line("0.5")}),
        Family(AutoregressiveGDConfig, "ar_gd", "lindyn", _pairs(**TINY), {
            "analysis_tasks": _NO_ANALYSIS, "eta": Line("0.1")}),
        Family(L2LMAMLConfig, "l2l_maml", "sinusoid-5shot", _pairs(**TINY), {
            "network": Line("linear"), "hidden": Line("16,16"), "inner_lr": Line("0.02"),
            "channels": Line("8", extra=_pairs(**CONV4_TINY), benchmark=OMNIGLOT),
            "inner_steps": Line("2"), "test_inner_steps": Line("5", "refused"),
            "first_order": Line("true"), "outer_lr": Line("0.002")}),
    ]  # fmt: skip
    return {family.config.__name__: family for family in families}


#: Long checks: OSAKA runs pre-train a Conv-4 first (~2 CPU-s each, 34 lines); the other
#: families here took 8-23 s each in the fast suite (runs with analyses and figures, or an
#: avalanche stream of ten steps a task). The rest take a few seconds each.
SLOW_FAMILIES = {"OnlineMetaConfig", "OnlineConfig", "LSAConfig", "LaMAMLConfig",
                 "GDSSMConfig", "SequenceConfig", "AvalancheConfig"}  # fmt: skip


def _configs_of_every_built_in() -> set[type]:
    import methods  # noqa: F401  (registers the built-ins)
    from benchmarks.protocols import PROTOCOLS
    from methods.registry import METHODS

    configs = {e.value.cls.Config for e in METHODS if e.source == "built-in"}
    # The suite's own protocols (a test may register another, as a plugin would).
    return configs | {protocol.Config for protocol in PROTOCOLS.values()
                      if protocol.__module__.startswith("benchmarks.protocols.")}  # fmt: skip


def test_every_built_in_setting_has_a_line():
    """Every config of a built-in method or protocol is a family here (or the MAML family's
    and the episodic protocol's, above), and every field of it has a line."""
    families = _families()
    covered = {family.config for family in families.values()} | {MAMLConfig, EpisodicConfig}
    assert _configs_of_every_built_in() <= covered
    for name, family in families.items():
        fields = sorted(f.name for f in dataclasses.fields(family.config))
        assert fields == sorted(family.lines), name


def family_errors(family: Family, data_root: str | None, conv4: bool = False) -> list[str]:
    """Each of the family's lines (or only its Conv-4 lines on Omniglot, ``conv4``), against
    one base run per method, benchmark and settings beside it (shared, made once)."""
    from benchmarks.planning.plan import plan_run
    from benchmarks.running.setting_effects import behaviour, judged

    made: dict[tuple, object] = {}

    def run(method: str, on: str, settings: dict[str, str]):
        key = (method, on, tuple(sorted(settings.items())))
        if key not in made:
            made[key] = behaviour(method, on, settings, data_root)
        return made[key]

    def plan(method: str, on: str, settings: dict[str, str]):
        made_plan = plan_run(method, on, 0, dict(settings), device="cpu", data_root=data_root)
        return made_plan.method, made_plan.protocol

    errors = []
    for key, line in family.lines.items():
        method, on = line.method or family.method, line.benchmark or family.benchmark
        if (on == OMNIGLOT) != conv4:
            continue
        settings, changed = {**dict(family.base), **dict(line.extra)}, {key: line.value}
        name = f"{key}={line.value} ({method} on {on})"
        try:
            if line.expected == "refused":
                with pytest.raises(ConfigError, match=key):
                    plan(method, on, {**settings, **changed})
                continue
            if plan(method, on, {**settings, **changed}) == plan(method, on, settings):
                errors.append(f"{name}: the same plan as without it (the base's own value?)")
                continue
            before, after = run(method, on, settings), run(method, on, {**settings, **changed})
        except BaseException as error:  # noqa: BLE001 (every line's failure reported at once)
            if isinstance(error, KeyboardInterrupt):
                raise
            errors.append(f"{name}: {type(error).__name__}: {error}"[:300])
            continue
        wrong = judged(before, after, key, f"{method} on {on}", line.expected == "speed only")
        if wrong:
            errors.append(f"{name}: {wrong}")
    return errors


def _data_for(benchmark: str, data_root) -> str | None:
    from tests.image_fixtures import write_mnist, write_omniglot

    if benchmark == "mnist-rotations":
        return str(write_mnist(data_root).parent)
    if benchmark.startswith("osaka"):
        write_omniglot(data_root), write_mnist(data_root, "mnist")
        write_mnist(data_root, "fashion_mnist")
        return str(data_root)
    return None


@pytest.mark.parametrize("name", sorted(set(_families()) - SLOW_FAMILIES))
def test_each_setting_of_every_other_family_changes_its_runs(name, data_root):
    family = _families()[name]
    assert family_errors(family, _data_for(family.benchmark, data_root)) == []


@pytest.mark.slow  # see SLOW_FAMILIES
@pytest.mark.parametrize("name", sorted(SLOW_FAMILIES))
def test_each_setting_of_the_longer_families_changes_its_runs(name, data_root):
    family = _families()[name]
    assert family_errors(family, _data_for(family.benchmark, data_root)) == []


def test_every_built_in_setting_says_what_it_does():
    """`show` prints each setting's help text: none is left without one."""
    missing = [f"{config.__name__}.{f.name}" for config in _configs_of_every_built_in()
               for f in dataclasses.fields(config)
               if not (f.metadata or {}).get("help")]  # fmt: skip
    assert sorted(missing) == []
