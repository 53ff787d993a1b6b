"""How a run computes: its device, bf16 autocast and torch.compile, validated at the edge,
recorded in the plan and applied to the run (on the CPU: autocast and dynamo run here)."""

from __future__ import annotations

import math

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch._dynamo.utils import counters

from benchmarks.cli.main import main
from benchmarks.planning.plan import plan_run
from benchmarks.protocols.recording import MemoryRecorder
from benchmarks.running.execute import execute
from mesabench_core import ConfigError
from methods.registry import METHODS
from tests.skip_policy import skip_for_hardware

TINY = {"iterations": "6", "val_every": "3", "val_tasks": "8", "test_tasks": "16",
        "log_every": "2", "checkpoint_every": "6"}  # fmt: skip
REFERENCES = ("gd", "gdpp", "ridge", "least_squares", "ar_gd", "ar_least_squares")


def _final(method: str, benchmark: str, **settings: str) -> dict[str, float]:
    plan = plan_run(method, benchmark, overrides={**TINY, **settings}, device="cpu")
    return execute(plan, MemoryRecorder())


@pytest.mark.parametrize("method, bench", [("maml", "sinusoid-5shot"), ("lsa", "sinusoid-5shot")])
def test_bf16_autocast_runs_on_the_cpu_and_changes_the_numbers_a_little(method, bench):
    fp32 = _final(method, bench)["final/test_loss"]
    bf16 = _final(method, bench, precision="bf16")["final/test_loss"]
    assert math.isfinite(bf16)
    # Autocast took effect (another rounding), and trained the same learner.
    assert 0 < abs(bf16 - fp32) / fp32 < 0.1, (fp32, bf16)


@pytest.mark.parametrize("method", REFERENCES)
def test_the_float64_reference_algorithms_refuse_bf16_in_one_line(method):
    benchmark = "lindyn" if method.startswith("ar_") else "linreg-icl"
    with pytest.raises(ConfigError, match=rf"^precision: method '{method}' runs at fp32 only"):
        plan_run(method, benchmark, overrides={"precision": "bf16"}, device="cpu")


@pytest.mark.parametrize(
    "method, bench",
    [("maml", "sinusoid-5shot"), ("lsa", "sinusoid-5shot"), ("causal_lsa", "lindyn")],
)
def test_compile_traces_the_step_and_changes_nothing(method, bench):
    eager = _final(method, bench)
    before = counters["stats"]["unique_graphs"]
    traced = _final(method, bench, compile="eager")
    assert counters["stats"]["unique_graphs"] > before  # dynamo traced the step
    for key in ("final/test_loss", "final/val_loss"):
        if key in eager:
            assert traced[key] == eager[key], key  # run as written: the same numbers


def test_compile_is_refused_in_one_line_where_a_method_does_not_take_it():
    assert not METHODS.get("er").value.cls.compilable
    with pytest.raises(ConfigError, match=r"^compile: method 'er' does not support"):
        plan_run("er", "mnist-rotations", overrides={"compile": "inductor"}, device="cpu")
    with pytest.raises(ConfigError, match=r"compile"):
        plan_run("maml", "sinusoid-5shot", overrides={"compile": "fast"}, device="cpu")


@pytest.mark.parametrize("device", ["meta", "tpu", "cuda:x", "gpu"])
def test_a_device_that_is_no_device_is_refused(device):
    with pytest.raises(ConfigError, match=r"device must be auto, cpu, cuda or cuda:N"):
        plan_run("maml", "sinusoid-5shot", device=device)


def test_cuda_where_there_is_none_is_refused_and_auto_is_the_cpu():
    if torch.cuda.is_available():
        skip_for_hardware("a CUDA device is present: no missing device to refuse")
    with pytest.raises(ConfigError, match=r"no CUDA device is available"):
        plan_run("maml", "sinusoid-5shot", device="cuda:0")
    assert plan_run("maml", "sinusoid-5shot", device="auto").device == "cpu"


def test_precision_and_compile_are_in_the_plan_and_its_identity_only_where_set():
    plain = plan_run("maml", "sinusoid-5shot", device="cpu")
    bf16 = plan_run("maml", "sinusoid-5shot", overrides={"precision": "bf16"}, device="cpu")
    traced = plan_run("maml", "sinusoid-5shot", overrides={"compile": "eager"}, device="cpu")
    assert plain.flat_params()["protocol.precision"] == "fp32"
    assert bf16.flat_params()["protocol.precision"] == "bf16"
    assert len({plain.config_hash(), bf16.config_hash(), traced.config_hash()}) == 3
    # Runs recorded before the settings existed keep their identity (the default is left
    # out of the hash), as tests/test_config.py's pinned hashes check.


def test_the_command_line_shortcuts_record_the_settings(store, capsys):
    code = main(["run", "--method", "maml", "--benchmark", "sinusoid-5shot", "--device", "cpu",
                 "--precision", "bf16", "--compile", "eager", "--tracking-uri", store,
                 *[f"--set={k}={v}" for k, v in TINY.items()]])  # fmt: skip
    assert code == 0
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("sinusoid-5shot").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["protocol.precision"] == "bf16"
    assert run.data.params["protocol.compile"] == "eager"
    assert main(["run", "--method", "gd", "--benchmark", "linreg-icl", "--device", "cpu",
                 "--precision", "bf16", "--tracking-uri", store]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: precision: method 'gd'")
    assert client.get_experiment_by_name("linreg-icl") is None  # nothing written
