"""``tune``: equal budgets, selection on validation only, resumable without duplicates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.store.hold import HOLD_ENV
from benchmarks.sweeps.tune import TuneSpec, _trial_spec, propose, trial_value
from methods.api import Choice, FloatRange, IntRange
from tests.helpers import (
    ROOT,
    fake_run,
    finished_runs,
    install_plugin_package,
    python_env,
    stored_runs,
    wait_for,
)

SPACE = {"inner_lr": FloatRange(1e-3, 1.0, log=True), "steps": IntRange(1, 5),
         "kind": Choice(("a", "b"))}  # fmt: skip


def test_a_proposal_depends_only_on_the_seed_and_the_trials_before_it():
    history = [({"inner_lr": 0.01, "steps": 2, "kind": "a"}, 0.5),
               ({"inner_lr": 0.3, "steps": 4, "kind": "b"}, None)]  # fmt: skip
    first = propose(SPACE, history, higher=False, seed=7)
    assert propose(SPACE, history, higher=False, seed=7) == first
    assert propose(SPACE, history, higher=False, seed=8) != first
    assert 1e-3 <= first["inner_lr"] <= 1.0 and first["steps"] in range(1, 6)
    assert first["kind"] in ("a", "b")


def test_tune_refuses_what_it_cannot_do_fairly_in_one_line(tmp_path, capsys):
    from benchmarks.cli.main import main

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cases = [
        (["--benchmark", "mnist-rotations", "--methods", "lamaml"], "has none (allowed: episodic"),
        (["--benchmark", "sinusoid-5shot", "--methods", "maml", "--select", "final/test_loss"],
         "never on test metrics"),
        (["--benchmark", "sinusoid-5shot", "--methods", "maml", "--select", "val/accuracy"],
         "validation does not log it (allowed: val/loss)"),
        (["--benchmark", "sinusoid-5shot", "--methods", "maml", "--seeds", "0,100"],
         "share [100]"),
        (["--benchmark", "linreg-icl", "--methods", "gd"], "declares no search space"),
        (["--benchmark", "sinusoid-5shot", "--methods", "maml", "--trials", "0"], "--trials"),
    ]  # fmt: skip
    for extra, said in cases:
        capsys.readouterr()
        argv = ["tune", "--trials", "2", *extra, "--tracking-uri", store]
        assert main(argv) == 2, extra
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, (extra, err)
    assert not (tmp_path / "mlflow.db").exists() or not MlflowClient(store).search_runs(
        [e.experiment_id for e in MlflowClient(store).search_experiments()])  # fmt: skip


def test_ctrl_c_while_a_tune_plans_a_round_ends_it_interrupted_and_resumable(
    store, capsys, monkeypatch
):
    """Ctrl-C outside a running sweep (here: while the next round is proposed) ends the tune
    as one landing inside a sweep does: exit 130, "the same command goes on"; not a bare
    "interrupted" from the command line's last resort."""
    from benchmarks.cli.main import main
    from benchmarks.sweeps import tune

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tune, "propose", interrupted)
    capsys.readouterr()
    assert main(["tune", "--benchmark", "sinusoid-5shot", "--methods", "maml", "--trials", "2",
                 "--tracking-uri", store]) == 130  # fmt: skip
    out = capsys.readouterr().out
    assert "tune interrupted; the same command goes on" in out


def test_a_trials_value_is_its_validation_at_the_iteration_it_selected(tmp_path, store):
    from benchmarks.store.tracking import MlflowTracker
    from benchmarks.sweeps.tune import MethodTune

    spec = TuneSpec("sinusoid-5shot", ("maml",), trials=1, seeds=(0,), tune_seeds=(100, 101))
    tune = MethodTune("maml", {"inner_lr": FloatRange(0.001, 1.0)}, "t1")
    sweep = _trial_spec(spec, tune, 0, {"inner_lr": 0.05})
    client = MlflowClient(store)
    for seed, (best, history) in {100: (20, {10: 0.5, 20: 0.3, 30: 0.4}),
                                  101: (30, {10: 0.9, 20: 0.8, 30: 0.7})}.items():  # fmt: skip
        # a test loss that would rank the runs the other way: never read
        run_id = fake_run(store, "maml", seed, {"final/best_iteration": best,
                                                "final/test_loss": 1.0 / best},
                          tuning=sweep.tuning, **dict(sweep.settings))  # fmt: skip
        for step, value in history.items():
            client.log_metric(run_id, "val/loss", value, step=step)
    assert trial_value(MlflowTracker(store), sweep, "val/loss") == pytest.approx((0.3 + 0.7) / 2)


def test_boards_leave_trials_out_and_label_a_tuned_row_apart_from_an_untuned_one(
    tmp_path, capsys, store
):
    from tests.helpers import leaderboard_json

    selected = json.dumps({"role": "selected", "tune": "t1", "trials": 20,
                           "selected_on": "val/loss", "trial": 3}, sort_keys=True)  # fmt: skip
    trial = json.dumps({"role": "trial", "tune": "t1", "trial": 0}, sort_keys=True)
    for seed in (0, 1):
        fake_run(store, "maml", seed, {"final/test_loss": 0.5})  # untuned, same settings
        fake_run(store, "maml", seed, {"final/test_loss": 0.4}, tuning=selected)
    fake_run(store, "maml", 100, {"final/test_loss": 0.01}, tuning=trial)
    board = leaderboard_json(store, capsys)
    rows = [r for r in board["rows"] if r["status"] == "ranked"]
    assert len(rows) == 2 and all(r["n"] == 2 for r in rows)  # never pooled
    tuned = [r for r in rows if "tuned: 20 trials, selected on val/loss" in r["config"]]
    assert len(tuned) == 1 and tuned[0]["stats"]["final/test_loss"]["mean"] == 0.4
    assert 100 not in {s for r in board["rows"] for s in r["seeds"]}  # the trial is no result
    assert board["excluded"]["TUNING TRIALS"] == 1
    assert [r["tuned"]["trials"] for r in rows if r["tuned"]] == [20]


def _tune_runs(store: str):
    # Through the store's creation lock (stored_runs): this polls a store the tune it
    # watches may still be creating, and a bare client's schema migration races that one's.
    out = []
    for run in stored_runs(store, "slope-shift"):
        tags = run.data.tags
        if "mesabench.method" in tags and run.info.status == "FINISHED":
            out.append((tags["mesabench.method"], json.loads(tags["mesabench.tuning"]),
                        float(run.data.params["method.slope"]), run))  # fmt: skip
    return out


@pytest.mark.slow
def test_tune_end_to_end_equal_budgets_validation_selection_and_resume(tmp_path):
    """Two methods, 4 trials each, on a benchmark whose test tasks reward the opposite
    slope: interrupted after its first trials and started again, every method ends with
    exactly 4 trials (no run twice) and the final runs of the trial with the best
    validation, which the test loss would not have chosen."""
    site = install_plugin_package("tune_probe", tmp_path)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = [sys.executable, "-m", "benchmarks", "tune", "--benchmark", "slope-shift",
            "--methods", "slope_a,slope_b", "--trials", "4", "--seeds", "0,1", "--warm",
            "--tracking-uri", store]  # fmt: skip
    env = python_env(PYTHONPATH=str(site))
    # Once 3 trials are in, every cell still going is held at its next record (the hold
    # file, benchmarks.store.hold) until the Ctrl-C has landed: the other 9 cells take
    # a second or two, and a tune that finished between two looks would exit 0.
    hold = tmp_path / "hold"
    first = subprocess.Popen(argv, env={**env, HOLD_ENV: str(hold)}, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)  # fmt: skip
    trials = ("mesabench.tuning", '%"role": "trial"%')
    wait_for(lambda: finished_runs(tmp_path / "mlflow.db", *trials) >= 3
             or first.poll() is not None, "3 finished trials", timeout=300, every=0.05)  # fmt: skip
    hold.touch()
    first.send_signal(signal.SIGINT)
    output, _ = first.communicate(timeout=120)
    hold.unlink()
    assert first.returncode == 130, output
    assert "the same command goes on" in output
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = _tune_runs(store)
    cells = [(m, run.data.tags["mesabench.config_hash"], run.data.tags["mesabench.seed"])
             for m, _, _, run in runs]  # fmt: skip
    assert len(cells) == len(set(cells))  # no cell FINISHED twice
    for method in ("slope_a", "slope_b"):
        trials = {t["trial"]: slope for m, t, slope, _ in runs
                  if m == method and t["role"] == "trial"}  # fmt: skip
        assert sorted(trials) == [0, 1, 2, 3]  # the same budget each
        finals = [(t, slope) for m, t, slope, _ in runs if m == method and t["role"] == "selected"]
        assert len(finals) == 2 and {t["trials"] for t, _ in finals} == {4}
        (role, slope), _ = finals
        # validation (y = x) prefers the largest slope; the test (y = -x) the smallest
        assert slope == max(trials.values()) and slope != min(trials.values())
        assert role["selected_on"] == "val/loss" and trials[role["trial"]] == slope
    again = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and len(_tune_runs(store)) == len(runs)  # nothing re-run
    board = subprocess.run([sys.executable, "-m", "benchmarks", "leaderboard", "--benchmark",
                            "slope-shift", "--tracking-uri", store],
                           env={**env, "COLUMNS": "250"},  # the label on one line
                           cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert "tuned: 4 trials, selected on val/loss" in board.stdout
    # The selected slope, beside the row (4 significant digits; the run keeps them all).
    assert f"set: slope={slope:.4g}; tuned" in board.stdout
    assert os.path.exists(site)
