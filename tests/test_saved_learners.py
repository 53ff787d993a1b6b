"""Every run keeps its learner; ``evaluate`` scores it again, here or on another benchmark."""

from __future__ import annotations

import json

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from benchmarks.store.tracking import MlflowTracker
from tests.helpers import CONTINUAL_TINY, TINY, only_run, stored_runs


def test_an_episodic_run_keeps_its_final_and_best_learner_with_its_config(store):
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", store]) == 0
    run = only_run(store, "sinusoid-5shot")
    tracker = MlflowTracker(store)
    final = tracker.load_learner(run.info.run_id, "final")
    best = tracker.load_learner(run.info.run_id, "best")
    assert json.loads(json.dumps(final["plan"])) == tracker.read_plan(run.info.run_id)
    assert final["run_id"] == run.info.run_id and best["name"] == "best"
    # Training ended at 20; the best validation was at 10 or 20: the same state, or not.
    same = _states_equal(final["state"], best["state"])
    assert same == (run.data.metrics["final/best_iteration"] == 20.0)


def _states_equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_states_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_states_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_evaluating_a_learner_on_its_own_benchmark_repeats_the_runs_test(store, capsys):
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", store]) == 0
    trained = only_run(store, "sinusoid-5shot")
    capsys.readouterr()
    assert main(["evaluate", trained.info.run_id, "--tracking-uri", store]) == 0
    evaluation = next(
        r for r in stored_runs(store, "sinusoid-5shot") if r.info.run_id != trained.info.run_id
    )
    assert evaluation.info.status == "FINISHED"
    # The same learner (best validation, which the run was tested with) on the same test
    # tasks: the same numbers, computed by a second process of scoring.
    for key in ("final/test_loss", "final/test_loss_steps1", "final/test_loss_steps10"):
        assert evaluation.data.metrics[key] == trained.data.metrics[key], key
    tags, params = evaluation.data.tags, evaluation.data.params
    assert tags["mesabench.evaluated_from"] == trained.info.run_id
    assert tags["mesabench.learner"] == "best" and tags["mesabench.trained_on"] == "sinusoid-5shot"
    assert params["evaluation.learner_from"] == trained.info.run_id
    assert "final/train_time_s" not in evaluation.data.metrics  # nothing was trained
    # Ranked apart from training runs: its own row, told apart by where the learner came from.
    assert tags["mesabench.config_hash"] != trained.data.tags["mesabench.config_hash"]
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "csv"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()[1:]
    assert len(rows) == 2
    assert rows[0].startswith("sinusoid-5shot,1,ranked,maml,")  # the training run ranks
    # The evaluation is listed apart, never ranked with training runs.
    assert rows[1].startswith("sinusoid-5shot,,other settings,maml,kind=evaluation of a "
                              "learner trained on sinusoid-5shot (ranked: training),")  # fmt: skip


def test_a_learner_scored_elsewhere_with_other_settings(store):
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", store]) == 0
    trained = only_run(store, "sinusoid-5shot")
    args = ["evaluate", trained.info.run_id, "--learner", "final", "--tracking-uri", store]
    assert main([*args, "--benchmark", "sinusoid-10shot", "--set", "test_tasks=60"]) == 0
    evaluation = only_run(store, "sinusoid-10shot")
    assert evaluation.data.params["protocol.test_tasks"] == "60"
    assert evaluation.data.params["task.shots"] == "10"  # the target's task
    assert evaluation.data.params["method.hidden"] == trained.data.params["method.hidden"]
    assert evaluation.data.tags["mesabench.learner"] == "final"
    # Scored in-process from the saved weights, on the target's test tasks: the same number.
    from benchmarks.planning.plan import plan_from_dict
    from benchmarks.protocols.recording import MemoryRecorder
    from benchmarks.running.execute import execute

    tracker = MlflowTracker(store)
    plan = plan_from_dict(tracker.read_plan(evaluation.info.run_id))
    learner = tracker.load_learner(trained.info.run_id, "final")["state"]
    again = execute(plan, MemoryRecorder(), learner=learner)
    assert again["final/test_loss"] == evaluation.data.metrics["final/test_loss"]
    # An interrupted evaluation resumes by scoring the same (final) learner again.
    client = MlflowClient(store)
    client.set_terminated(evaluation.info.run_id, "KILLED")
    assert main(["run", "--resume", evaluation.info.run_id, "--tracking-uri", store]) == 0
    resumed = client.get_run(evaluation.info.run_id)
    assert resumed.info.status == "FINISHED"
    assert resumed.data.metrics["final/test_loss"] == evaluation.data.metrics["final/test_loss"]


def test_a_continual_learner_scored_again_gives_its_retained_accuracy(store, tmp_path):
    from tests.image_fixtures import write_mnist

    data = write_mnist(tmp_path / "data").parent
    common = ["--data-root", str(data), "--tracking-uri", store]
    assert main(["run", "--method", "er", "--benchmark", "mnist-permutations", *CONTINUAL_TINY,
                 *common]) == 0  # fmt: skip
    trained = only_run(store, "mnist-permutations")
    assert main(["evaluate", trained.info.run_id, *common]) == 0
    evaluation = next(
        r for r in stored_runs(store, "mnist-permutations") if r.info.run_id != trained.info.run_id
    )
    # RA is the mean accuracy over all tasks after the stream: the last row of the matrix.
    assert evaluation.data.metrics["final/test_accuracy"] == pytest.approx(
        trained.data.metrics["final/ra"], abs=1e-12
    )
    assert evaluation.data.tags["mesabench.learner"] == "final"  # no validation: no best


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--benchmark", "linreg-icl"],
            "does not fit 'linreg-icl' (another network or input size)",
        ),
        (["--benchmark", "sinusoid-5shot", "--set", "hidden=8,8"], "does not fit"),
        (["--learner", "nope"], "invalid choice"),
        (["--set", "iteratoins=3"], "unknown setting 'iteratoins'"),
    ],
)
def test_an_incompatible_evaluation_is_refused_with_nothing_written(store, capsys, extra, message):
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", store]) == 0
    trained = only_run(store, "sinusoid-5shot")
    capsys.readouterr()
    assert main(["evaluate", trained.info.run_id, *extra, "--tracking-uri", store]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert len(stored_runs(store, "sinusoid-5shot")) == 1 and stored_runs(store, "linreg-icl") == []


def test_only_finished_training_runs_are_evaluated(store, capsys):
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", store]) == 0
    trained = only_run(store, "sinusoid-5shot")
    assert main(["evaluate", "f" * 32, "--tracking-uri", store]) == 2
    assert main(["evaluate", trained.info.run_id, "--tracking-uri", store]) == 0
    evaluation = next(
        r for r in stored_runs(store, "sinusoid-5shot") if r.info.run_id != trained.info.run_id
    )
    capsys.readouterr()
    assert main(["evaluate", evaluation.info.run_id, "--tracking-uri", store]) == 2
    assert f"name the training run {trained.info.run_id}" in capsys.readouterr().err
    MlflowClient(store).set_terminated(trained.info.run_id, "KILLED")
    assert main(["evaluate", trained.info.run_id, "--tracking-uri", store]) == 2
    assert "is KILLED, not FINISHED" in capsys.readouterr().err


def test_online_runs_keep_the_pretraining_learners_under_their_phase():
    from benchmarks.protocols.online import PhaseRecorder
    from benchmarks.protocols.recording import MemoryRecorder

    recorder = MemoryRecorder()
    PhaseRecorder(recorder, "pretrain").save_learner({"w": torch.ones(2)}, "best")
    assert list(recorder.learners) == ["pretrain_best"]


def test_evaluating_a_sweeps_parent_run_is_one_line_and_exit_2(store, capsys):
    from benchmarks.sweeps.in_store import SWEEP_TAG

    # The cell run in-process first: the sweep then finds it done and only records its
    # parent run (a real one), without starting a cell process.
    assert main(["run", "--method", "fomaml", *TINY, "--tracking-uri", store]) == 0
    assert main(["sweep", "--benchmark", "sinusoid-5shot", "--methods", "fomaml", "--seeds",
                 "0", *TINY, "--tracking-uri", store]) == 0  # fmt: skip
    (parent,) = [r for r in stored_runs(store) if SWEEP_TAG in r.data.tags]
    capsys.readouterr()
    assert main(["evaluate", parent.info.run_id, "--tracking-uri", store]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is no training run of a method (a sweep's parent run?)" in line


def test_an_evaluation_says_the_settings_it_scored_under(store, capsys):
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", store]) == 0
    trained = only_run(store, "sinusoid-5shot")
    capsys.readouterr()
    assert main(["evaluate", trained.info.run_id, "--set", "test_tasks=16", "--set",
                 "input_range=(-4.0, 4.0)", "--tracking-uri", store]) == 0  # fmt: skip
    header = capsys.readouterr().out.splitlines()[0]  # one line, however long
    assert f"(the learner of run {trained.info.run_id}), scored with " in header
    assert "protocol.test_tasks=16" in header and "task.input_range=(-4.0, 4.0)" in header


def test_the_final_metrics_table_prints_counts_whole_and_names_its_interval():
    """89610 parameters, not 89610.0000; a ± is the 95% CI over the run's test episodes,
    said in the header; sparsity beside scored sparsity explained in the caption."""
    import io

    from rich.console import Console

    from benchmarks.running.service import final_table

    console = Console(width=120, file=io.StringIO())
    console.print(final_table({"final/num_params": 89610.0, "final/test_loss": 0.12345678,
                               "final/test_loss_ci95": 0.01, "final/sparsity/w": 0.5,
                               "final/scored_sparsity/w": 0.25}))  # fmt: skip
    text = console.file.getvalue()
    assert "89610 " in text and "89610.0" not in text
    assert "0.1235 ± 0.0100" in text and "95% CI (test episodes)" in text
    assert "the weights the test metrics came from" in text
