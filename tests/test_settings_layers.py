"""Settings are resolved once, over an ordered list of layers, and every built-in plan
hashes exactly as it did before the layers were made explicit (so that stores and finished
sweep cells keep matching)."""

from __future__ import annotations

import json

import pytest

from benchmarks.catalog.installed import benchmark_spec, method_entry
from benchmarks.catalog.specs import BENCHMARKS
from benchmarks.planning.plan import plan_run
from benchmarks.planning.resolve import layers_of
from mesabench_core import BadInput
from methods.registry import METHODS
from tests.helpers import ROOT

#: Every built-in (method, benchmark, preset) the protocols allow: its config hash, or the
#: one-line refusal, as recorded from the suite before this file existed.
RECORDED = json.loads((ROOT / "tests" / "data" / "plan_hashes.json").read_text())


def _every_cell():
    for benchmark in BENCHMARKS:
        for method in METHODS:
            if benchmark.value.protocol_name not in method.value.cls.protocols:
                continue
            for preset in [None, *sorted(benchmark.value.presets)]:
                yield method.name, benchmark.name, preset


def test_every_built_in_plan_hashes_as_it_did_before():
    found = {}
    for method, benchmark, preset in _every_cell():
        key = f"{method}|{benchmark}|{preset or ''}"
        try:
            found[key] = plan_run(method, benchmark, 0, {}, "cpu", preset=preset).config_hash()
        except BadInput as err:
            found[key] = f"error: {err}"
    assert set(found) >= set(RECORDED)  # nothing built in went missing
    changed = {k: (RECORDED[k], found[k]) for k in RECORDED if found[k] != RECORDED[k]}
    assert changed == {}
    assert len(RECORDED) > 600  # the file covers the suite, not a sample


def test_the_layers_are_listed_in_their_order_lowest_first():
    entry, spec = method_entry("sparse_maml"), benchmark_spec("omniglot-5w1s")
    names = [layer.name for layer in layers_of("sparse_maml", entry, spec, "sparse-maml", {})]
    assert names == [
        "the task source of omniglot-5w1s",
        "benchmark omniglot-5w1s",
        "method sparse_maml's registered variant",
        "benchmark omniglot-5w1s's settings for sparse_maml",
        "preset 'sparse-maml' of omniglot-5w1s",
        "--set",
    ]


def test_each_field_records_the_layer_that_decided_it():
    plan = plan_run("sparse_maml", "omniglot-5w1s", 0, {"test_tasks": "7"}, "cpu",
                    preset="sparse-maml")  # fmt: skip
    set_by = plan.set_by
    assert set_by["protocol.test_tasks"] == "--set" and plan.protocol.test_tasks == 7
    assert set_by["method.modulation"] == "method sparse_maml's registered variant"
    preset = benchmark_spec("omniglot-5w1s").presets["sparse-maml"]
    for key in preset:  # the preset's keys are the preset's, unless the user set them
        section = next(s for s in ("method", "task", "protocol") if f"{s}.{key}" in set_by)
        assert set_by[f"{section}.{key}"] == "preset 'sparse-maml' of omniglot-5w1s", key
    assert set_by["task.ways"] == "benchmark omniglot-5w1s"
    assert set_by["method.grad_clip"] == "method class MAMLConfig"
    # Provenance is not identity: the hash is the plan's settings alone.
    assert "set_by" not in plan.to_dict()


def test_the_task_sources_method_defaults_read_the_resolved_task():
    """linreg's task source gives gradient learners the optimal one-step rate for the input
    range; with the range changed by --set, the rate follows it, and says where it came
    from (one resolution, where it used to take two passes)."""
    wide = plan_run("maml", "linreg-icl", 0, {}, "cpu")
    narrow = plan_run("maml", "linreg-icl", 0, {"input_range": "0.5"}, "cpu")
    assert narrow.set_by["method.inner_lr"] == "the task source of linreg-icl"
    assert narrow.method.inner_lr == pytest.approx(narrow.source.one_step_gd_optimum()[0])
    # The optimal rate scales as 1/range^2 (x ~ U(-r, r): E[x^2] = r^2 / 3).
    assert narrow.method.inner_lr / wide.method.inner_lr == pytest.approx(4.0, rel=0.02)
    user = plan_run("maml", "linreg-icl", 0, {"input_range": "0.5", "inner_lr": "0.3"}, "cpu")
    assert user.method.inner_lr == 0.3 and user.set_by["method.inner_lr"] == "--set"


def test_a_presets_own_mistake_is_named_as_the_presets():
    """A preset is a layer: its unknown key is reported with its name, before a user's."""
    from benchmarks.planning.resolve import Layer, resolve

    entry, spec = method_entry("maml"), benchmark_spec("sinusoid-5shot")
    layers = [*layers_of("maml", entry, spec, None, {})[:-1],
              Layer("preset 'broken' of sinusoid-5shot", "routed", {"iteratons": "5"},
                    blame="preset 'broken' of sinusoid-5shot: "),
              Layer("--set", "routed", {"iterations": "5"})]  # fmt: skip
    with pytest.raises(BadInput, match=r"^preset 'broken' of sinusoid-5shot: unknown setting "
                       r"'iteratons'; did you mean"):  # fmt: skip
        resolve("maml", entry, spec, layers)


def test_show_prints_which_layer_set_each_setting(capsys):
    from benchmarks.cli.main import main

    assert main(["show", "sparse_maml", "--benchmark", "linreg-icl", "--set",
                 "input_range=0.5", "--set", "iterations=3"]) == 0  # fmt: skip
    body = json.loads(capsys.readouterr().out)
    assert body["set_by"]["task.input_range"] == "--set"
    assert body["set_by"]["protocol.iterations"] == "--set"
    assert body["set_by"]["method.inner_lr"] == "the task source of linreg-icl"
    assert body["set_by"]["method.modulation"] == "method sparse_maml's registered variant"
    assert set(body["set_by"]) == {f"{s}.{k}" for s in ("method", "task", "protocol")
                                   for k in body[s] if k != "name"}  # fmt: skip


def test_a_field_added_later_counts_in_the_identity_only_where_set():
    """New fields (param(added=...)) leave the recorded hashes alone at their default, and
    set, make another cell: a run with a task pool never takes a plain run's cell."""
    plain = plan_run("lsa", "linreg-icl", 0, {}, "cpu")
    assert plain.config_hash() == RECORDED["lsa|linreg-icl|"]
    for key, value in (("task_pool", "16"), ("input_dist", "normal"), ("outputs", "2"),
                       ("copy_scale", "20")):  # fmt: skip
        other = plan_run("lsa", "linreg-icl", 0, {key: value}, "cpu")
        assert other.config_hash() != plain.config_hash(), key
