"""The Python API: every example in docs/python-api.md runs as written, in order."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

from tests.helpers import ROOT, python_env

DOC = ROOT / "docs" / "python-api.md"


def test_every_example_in_the_python_api_guide_runs(tmp_path, store):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4
    script = tmp_path / "examples.py"
    script.write_text("\n".join(textwrap.dedent(b) for b in blocks))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
        env=python_env(MLFLOW_TRACKING_URI=store), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "protocol.iterations must be >= 1 (got 0)" in done.stdout
    assert "lower is better" in done.stdout
    assert not (tmp_path / "runs").exists()  # results went where the environment said


def test_overrides_take_python_values():
    from benchmarks.planning.plan import plan_run

    plan = plan_run("maml", overrides={"eval_steps": [1, 3], "select_best": False,
                                       "outer_lr": 1, "iterations": 7})  # fmt: skip
    assert plan.protocol.eval_steps == (1, 3) and plan.protocol.select_best is False
    assert plan.method.outer_lr == 1.0 and isinstance(plan.method.outer_lr, float)
    assert plan.protocol.iterations == 7
    import pytest

    from benchmarks.planning.config import ConfigError

    with pytest.raises(ConfigError, match=r"protocol.iterations must be int \(got 2.5\)"):
        plan_run("maml", overrides={"iterations": 2.5})
    with pytest.raises(ConfigError, match="must be a finite number"):
        plan_run("maml", overrides={"inner_lr": float("nan")})
