"""Typed configs: parsing, validation and override resolution."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.planning.config import ConfigError, apply_overrides, param, parse_value, validate
from benchmarks.planning.plan import plan_run
from benchmarks.protocols import EpisodicConfig
from mesabench_datasets.regression import LinRegConfig, SinusoidConfig
from methods.api import EpisodicMethod
from methods.gradient.maml import MAMLConfig


@pytest.mark.parametrize(
    "tp, text, value",
    [
        (int, "3", 3),
        (float, "1e-3", 1e-3),
        (bool, "false", False),
        (bool, "1", True),
        (tuple[int, ...], "1,10", (1, 10)),
        (tuple[float, float], "(0.1, 5)", (0.1, 5.0)),
        (float | None, "none", None),
        (float | None, "0.5", 0.5),
    ],
)
def test_parse_value(tp, text, value):
    assert parse_value(tp, text, "f") == value


def test_validate_reports_field_and_range():
    with pytest.raises(ConfigError, match=r"task\.shots must be >= 1 \(got 0\)"):
        validate(SinusoidConfig(shots=0), prefix="task.")
    with pytest.raises(ConfigError, match="amplitude must be"):
        validate(SinusoidConfig(amplitude=(5.0, 1.0)))
    with pytest.raises(ConfigError, match="modulation needs adapted parameters"):
        validate(MAMLConfig(adapt="none", modulation="binary_mask"))


def test_overrides_resolve_bare_and_qualified_keys():
    sections = {"method": MAMLConfig(), "task": LinRegConfig(), "protocol": EpisodicConfig()}
    out = apply_overrides(sections, {"inner_lr": "0.5", "task.dim": "4", "eval_steps": "0,1,5"})
    assert out["method"].inner_lr == 0.5 and out["task"].dim == 4
    assert out["protocol"].eval_steps == (0, 1, 5)
    assert sections["method"].inner_lr == 0.01, "overrides never mutate the originals"
    with pytest.raises(ConfigError, match="is ambiguous; write one of method.x, task.x"):
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class A:
            x: int = 1

        apply_overrides({"method": A(), "task": A()}, {"x": "2"})
    with pytest.raises(ConfigError, match="unknown section 'model'"):
        apply_overrides(sections, {"model.inner_lr": "1"})


@dataclasses.dataclass(frozen=True)
class _CollidingConfig:
    # Same names as the MAML family's settings, other meanings.
    inner_lr: float = param(0.5, min=0.0, help="width of this plugin's kernel")
    inner_steps: int = param(7, min=1, help="neighbours this plugin averages")


class _Colliding(EpisodicMethod):
    Config = _CollidingConfig
    protocols = frozenset({"episodic"})

    def meta_train_step(self, batch):  # pragma: no cover - planning only
        return {"loss": 0.0}

    def predict(self, support_x, support_y, query_x, steps=None):  # pragma: no cover
        return query_x

    def state_dict(self):  # pragma: no cover
        return {}

    def load_state_dict(self, state):  # pragma: no cover
        pass


@pytest.fixture
def colliding(monkeypatch):
    """A plugin-like method registered for one test (removed afterwards)."""
    from methods.registry import METHODS, MethodEntry

    entries = dict(METHODS.entries)
    monkeypatch.setattr(METHODS, "entries", entries)
    METHODS.add("colliding", MethodEntry(_Colliding), "a-plugin 1.0")
    return _Colliding


def test_benchmark_defaults_never_overwrite_a_plugins_same_named_fields(colliding):
    # linreg-icl's task source gives every method inner_lr = 1.515 (the optimal GD rate);
    # omniglot-5w1s gives inner_lr 0.4, inner_steps 1 (MAML's settings).
    for benchmark in ("linreg-icl", "omniglot-5w1s"):
        plan = plan_run("colliding", benchmark, device="cpu")
        assert (plan.method.inner_lr, plan.method.inner_steps) == (0.5, 7), benchmark
    assert plan_run("maml", "omniglot-5w1s", device="cpu").method.inner_lr == 0.4
    # A method that declares the shared meaning takes the benchmark's value.
    colliding.shared_settings = frozenset({"inner_lr"})
    try:
        plan = plan_run("colliding", "linreg-icl", device="cpu")
        assert plan.method.inner_lr == pytest.approx(1.515, rel=1e-3)
        assert plan.method.inner_steps == 7
    finally:
        colliding.shared_settings = frozenset()


def test_an_unknown_key_in_any_defaults_layer_names_the_layer(colliding, monkeypatch):
    from benchmarks.catalog import specs
    spec = specs.BENCHMARKS.get("sinusoid-5shot").value
    typo = dataclasses.replace(spec, method_settings={"colliding": {"inner_stepz": 3}})
    monkeypatch.setitem(specs.BENCHMARKS.entries, "sinusoid-5shot",
                        dataclasses.replace(specs.BENCHMARKS.entries["sinusoid-5shot"],
                                            value=typo))  # fmt: skip
    expected = "sinusoid-5shot's settings for colliding sets unknown setting 'inner_stepz'"
    with pytest.raises(ConfigError, match=f"benchmark {expected}; did you mean inner_steps"):
        plan_run("colliding", "sinusoid-5shot", device="cpu")
    broadcast = dataclasses.replace(spec, method_defaults={"inner_learning_rate": 0.1})
    monkeypatch.setitem(specs.BENCHMARKS.entries, "sinusoid-5shot",
                        dataclasses.replace(specs.BENCHMARKS.entries["sinusoid-5shot"],
                                            value=broadcast))  # fmt: skip
    with pytest.raises(ConfigError, match="benchmark sinusoid-5shot sets .*inner_learning_rate"):
        plan_run("maml", "sinusoid-5shot", device="cpu")


def test_a_network_that_cannot_fit_the_benchmark_is_refused_before_recording(tmp_path):
    from benchmarks.cli.main import main

    with pytest.raises(ConfigError, match=r"method.network=mlp: network 'mlp' needs flat"):
        plan_run("maml", "omniglot-5w1s", overrides={"network": "mlp"}, device="cpu")
    with pytest.raises(ConfigError, match=r"method.network=conv4: conv4 needs \[channels"):
        plan_run("maml", "sinusoid-5shot", overrides={"network": "conv4"}, device="cpu")
    assert plan_run("maml", "omniglot-5w1s", overrides={"network": "conv4"}, device="cpu")
    store = tmp_path / "store" / "mlflow.db"
    args = ["--benchmark", "omniglot-5w1s", "--set", "network=mlp", "--tracking-uri",
            f"sqlite:///{store}"]  # fmt: skip
    assert main(["run", "--method", "maml", *args]) == 2
    assert main(["sweep", "--methods", "maml,fomaml", "--seeds", "0-1", *args]) == 2
    assert not store.exists()  # nothing recorded, not even a store


def test_a_broken_preset_is_named_as_the_presets_mistake(monkeypatch):
    from benchmarks.catalog import specs
    entry = specs.BENCHMARKS.entries["sinusoid-5shot"]
    broken = dataclasses.replace(entry.value, presets={"fast": {"iteratoins": "10"}})
    monkeypatch.setitem(specs.BENCHMARKS.entries, "sinusoid-5shot",
                        dataclasses.replace(entry, value=broken))  # fmt: skip
    with pytest.raises(ConfigError, match=r"preset 'fast' of sinusoid-5shot: unknown setting "
                       r"'iteratoins'; did you mean .*iterations"):  # fmt: skip
        plan_run("maml", "sinusoid-5shot", preset="fast", device="cpu")


def test_a_run_builds_its_task_source_once(monkeypatch):
    from benchmarks.protocols.recording import MemoryRecorder
    from benchmarks.running.execute import execute, prepare_data

    built = []
    original = SinusoidConfig.build
    monkeypatch.setattr(SinusoidConfig, "build", lambda self: built.append(1) or original(self))
    plan = plan_run("maml", overrides={"iterations": 2, "val_every": 1, "val_tasks": 4,
                                       "test_tasks": 8}, device="cpu")  # fmt: skip
    prepare_data(plan)
    execute(plan, MemoryRecorder())
    # Planned (settings resolved over it), prepared, given to the method and to the
    # protocol: one object, built once.
    assert len(built) == 1


@pytest.mark.parametrize("said", ["x has no effect without y", "method.x has no effect without y"])
def test_a_sections_check_names_its_section_once(said):
    """A check's message is prefixed with its section unless it already names it (a plugin
    writing the full name got ``method.method.x``)."""

    @dataclasses.dataclass(frozen=True)
    class Settings:
        x: int = 1

        def check(self) -> None:
            raise ConfigError(said)

    with pytest.raises(ConfigError) as refused:
        validate(Settings(), prefix="method.")
    assert str(refused.value) == "method.x has no effect without y"
