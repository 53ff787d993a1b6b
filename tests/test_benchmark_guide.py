"""docs/writing-a-benchmark.md's example, installed as a plugin and used as a user would."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

from tests.helpers import ROOT, python_env
from tests.test_plugins import make_distribution

DOC = ROOT / "docs" / "writing-a-benchmark.md"


def test_the_guides_benchmark_runs_through_list_show_run_resume_and_leaderboard(tmp_path, run_cli):
    text = DOC.read_text()
    (module,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (toml,) = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    entry = re.search(r"^([\w-]+) = \"([\w.:]+)\"$", toml, flags=re.M)
    site = tmp_path / "site"
    make_distribution(site, "my-benchmarks", "0.3", {"my_benchmarks": module},
                      f"[mesabench.benchmarks]\n{entry.group(1)} = {entry.group(2)}\n")  # fmt: skip
    env = {"PYTHONPATH": str(site)}
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"

    listed = run_cli("list", "benchmarks", **env)
    row = next(line for line in listed.stdout.splitlines() if "quadratic-5shot" in line)
    assert "my-benchmarks 0.3" in row and listed.stderr.count("plugin") == 0
    shown = run_cli("show", "quadratic-5shot", "--method", "maml", **env)
    assert shown.returncode == 0 and '"inner_lr": 0.01' in shown.stdout

    # A run interrupted after a checkpoint, then resumed to the end.
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "run", "--method", "maml", "--benchmark",
         "quadratic-5shot", "--tracking-uri", store],
        env=python_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    artifacts = tmp_path / "store" / "artifacts" / "quadratic-5shot"
    deadline = time.monotonic() + 180
    while not list(artifacts.glob("*/artifacts/checkpoints/last.pt")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("quadratic-5shot").experiment_id
    (killed,) = client.search_runs([experiment])
    assert killed.info.status == "KILLED"
    assert killed.data.tags["mesabench.benchmark_source"] == "my-benchmarks 0.3"
    resumed = run_cli("run", "--resume", killed.info.run_id, "--tracking-uri", store, **env)
    assert resumed.returncode == 0, resumed.stderr
    (run,) = client.search_runs([experiment])
    assert run.info.status == "FINISHED"
    # 2,000 iterations of MAML learn the family: far below the loss of predicting zero
    # (E[y^2] = E[a^2] E[x^4] + E[b^2] E[x^2] + E[c^2] = 16/15 + 4/9 + 1/3 ~ 1.84 for
    # a, b, c ~ U(-1, 1) and x ~ U(-2, 2)).
    assert run.data.metrics["final/test_loss"] < 0.5

    quick = run_cli("run", "--method", "fomaml", "--benchmark", "quadratic-5shot", "--preset",
                    "quick", "--tracking-uri", store, **env)  # fmt: skip
    assert quick.returncode == 0, quick.stderr
    board = run_cli("leaderboard", "--benchmark", "quadratic-5shot", "--tracking-uri", store,
                    "--format", "csv", **env)  # fmt: skip
    assert board.returncode == 0, board.stderr
    lines = board.stdout.splitlines()
    assert len(lines) == 3 and {"maml", "fomaml"} <= set(board.stdout.replace(",", " ").split())
