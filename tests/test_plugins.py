"""Third-party methods through entry points, built from docs/writing-a-method.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import ROOT, TINY

DOC = ROOT / "docs" / "writing-a-method.md"
PLUGIN_BENCHMARK = """
from benchmarks.protocols import EpisodicConfig
from benchmarks.specs import BenchmarkSpec
from datasets.regression import SinusoidConfig

WIDE = BenchmarkSpec(
    name="sinusoid-wide",
    description="sinusoids on a twice wider input range",
    task=SinusoidConfig(input_range=(-10.0, 10.0)),
    protocol=EpisodicConfig(iterations=20, val_every=10, val_tasks=20, test_tasks=50),
)
"""


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def make_distribution(
    site: Path, name: str, version: str, modules: dict[str, str], entry_points: str
) -> None:
    """A real (if tiny) installed distribution: modules plus a .dist-info on ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (site / f"{module}.py").write_text(source)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def plugin_site(tmp_path: Path) -> Path:
    """The docs' example as distribution 'my-methods', plus one plugin that cannot import."""
    (example,) = _blocks("python")
    (toml,) = _blocks("toml")
    entry = re.search(r"^(\w+) = \"([\w.:]+)\"$", toml, flags=re.M)
    assert entry, "the docs must show one entry-point line"
    site = tmp_path / "site"
    make_distribution(
        site,
        "my-methods",
        "0.1",
        {
            "my_methods": example,
            "broken_methods": "import nope\n",
            "my_benchmarks": PLUGIN_BENCHMARK,
        },
        "[mesabench.methods]\n"
        f"{entry.group(1)} = {entry.group(2)}\n"
        "broken = broken_methods:Broken\n"
        "[mesabench.benchmarks]\n"
        "sinusoid-wide = my_benchmarks:WIDE\n",
    )
    return site


def test_docs_example_runs_end_to_end_as_a_plugin(plugin_site, run_cli, tmp_path):
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    listed = run_cli("list", "methods", PYTHONPATH=str(plugin_site))
    assert listed.returncode == 0
    row = next(line for line in listed.stdout.splitlines() if "kernel_regression" in line)
    assert "my-methods 0.1" in row
    assert "plugin method 'broken' from my-methods 0.1 failed to load" in listed.stderr
    assert "ModuleNotFoundError" in listed.stderr

    result = run_cli(
        "run",
        "--method",
        "kernel_regression",
        *TINY,
        "--set",
        "bandwidth=0.5",
        "--tracking-uri",
        store,
        PYTHONPATH=str(plugin_site),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("sinusoid-5shot")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["mesabench.method_source"] == "my-methods 0.1"
    assert run.data.params["method.bandwidth"] == "0.5"
    assert run.data.metrics["final/test_loss"] < 10.0
    # Counted without any help from the plugin: its one learned tensor, the bandwidth.
    assert run.data.metrics["final/num_params"] == 1.0

    # A plugin benchmark, run by a built-in method.
    wide = run_cli(
        "run",
        "--method",
        "fomaml",
        "--benchmark",
        "sinusoid-wide",
        "--tracking-uri",
        store,
        PYTHONPATH=str(plugin_site),
    )
    assert wide.returncode == 0, wide.stdout + wide.stderr
    assert client.get_experiment_by_name("sinusoid-wide") is not None

    # A broken plugin does not stop the built-ins.
    builtin = run_cli(
        "run", "--method", "anil", *TINY, "--tracking-uri", store, PYTHONPATH=str(plugin_site)
    )
    assert builtin.returncode == 0, builtin.stderr


def test_a_plugin_taking_a_builtin_name_is_refused_alone(plugin_site, tmp_path, run_cli):
    other = tmp_path / "other"
    make_distribution(
        other,
        "copycat",
        "0.2",
        {"copycat": "from methods.maml import GradientMetaLearner as Copy\n"
                    "from benchmarks.specs import BenchmarkSpec, BENCHMARKS\n"
                    "import dataclasses\n"
                    "WRONG = dataclasses.replace(BENCHMARKS.get('sinusoid-5shot').value,\n"
                    "                            name='sinusoid-renamed')\n"},
        "[mesabench.methods]\nmaml = copycat:Copy\nmamlcopy = copycat:Copy\n"
        "[mesabench.benchmarks]\nsinusoid-typo = copycat:WRONG\n",
    )  # fmt: skip
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    env = {"PYTHONPATH": f"{plugin_site}:{other}"}
    result = run_cli("run", "--method", "maml", *TINY, "--tracking-uri", store, **env)
    assert result.returncode == 0, result.stderr  # the built-in still works
    assert "method 'maml' from copycat 0.2 refused: the name is a built-in's" in result.stderr
    run = MlflowClient(store).search_runs(
        [MlflowClient(store).get_experiment_by_name("sinusoid-5shot").experiment_id]
    )[0]
    assert run.data.tags["mesabench.method_source"] == "built-in"
    listed = run_cli("list", "methods", **env)
    assert listed.returncode == 0
    row = next(line for line in listed.stdout.splitlines() if line.startswith("│ maml "))
    assert "built-in" in row
    assert "refused: the name is a built-in's" in listed.stderr  # the conflict is shown
    assert "mamlcopy" in listed.stdout  # the same class under its own name is fine
    benchmarks = run_cli("list", "benchmarks", **env)
    assert "entry point 'sinusoid-typo' from copycat 0.2 holds benchmark spec" in benchmarks.stderr
    assert "sinusoid-renamed" not in benchmarks.stdout


def test_plugins_can_be_switched_off(plugin_site, run_cli, tmp_path):
    result = run_cli("list", "methods", PYTHONPATH=str(plugin_site), MESABENCH_DISABLE_PLUGINS="1")
    assert result.returncode == 0
    assert "kernel_regression" not in result.stdout and "broken" not in result.stderr
    assert "plugins disabled" in result.stdout
    run = run_cli(
        "run",
        "--method",
        "kernel_regression",
        PYTHONPATH=str(plugin_site),
        MESABENCH_DISABLE_PLUGINS="1",
        cwd=tmp_path,
    )
    assert run.returncode == 2 and "unknown method 'kernel_regression'" in run.stderr
