"""Every setting of the MAML family and of the episodic protocol does what it says: set to a
second value, the run's behaviour (what it measured and kept) changes; a setting that only
changes speed leaves the numbers equal; one that would do nothing is refused. A field added
to either config without a line here fails the first test, so no setting joins unchecked.
(The other families' settings are not yet covered here.)"""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.protocols.episodic import EpisodicConfig
from benchmarks.running.setting_effects import setting_effect
from mesabench_core import ConfigError
from methods.gradient.maml import MAMLConfig

#: A run of a second: every record, validation and checkpoint happens at least twice.
TINY = {"iterations": "3", "meta_batch": "4", "val_every": "2", "val_tasks": "4",
        "test_tasks": "8", "eval_chunk": "8", "log_every": "1", "checkpoint_every": "2"}
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


@pytest.mark.slow  # two Conv-4 runs on generated Omniglot: with the long checks
def test_the_conv4_width_changes_the_run(data_root):
    from tests.image_fixtures import write_omniglot

    write_omniglot(data_root)
    value, method, _, expected = METHOD["channels"]
    base = {**TINY, "val_classes": "6", "meta_batch": "2", "test_tasks": "4", "eval_chunk": "4",
            "val_tasks": "2", "channels": "4"}  # fmt: skip
    _check(method, "channels", value, expected, base, str(data_root), "omniglot-5w1s")


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
