"""Third-party methods through entry points, built from docs/writing-a-method.md."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import (
    PLUGIN_PACKAGES,
    ROOT,
    TINY,
    install_plugin_package,
    interrupt_after_checkpoint,
)

DOC = ROOT / "docs" / "writing-a-method.md"
PLUGIN_BENCHMARK = """
from benchmarks.plugin_api import BenchmarkSpec, EpisodicConfig
from mesabench_datasets.regression import SinusoidConfig  # private, but the test wants a real task

WIDE = BenchmarkSpec(
    name="sinusoid-wide",
    description="sinusoids on a twice wider input range",
    task=SinusoidConfig(input_range=(-10.0, 10.0)),
    protocol=EpisodicConfig(iterations=20, val_every=10, val_tasks=20, test_tasks=50),
    api_version=1,
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


@pytest.fixture(scope="module")
def guide_site(tmp_path_factory) -> Path:
    """The guide's example installed with pip, once for the module (its tests only read it)."""
    return install_plugin_package("my_methods", tmp_path_factory.mktemp("guide"))


@pytest.fixture
def plugin_site(tmp_path: Path, guide_site: Path) -> Path:
    """The guide's example installed with pip, beside a distribution holding a plugin that
    cannot import and a plugin benchmark."""
    site = guide_site
    extra = tmp_path / "extra"
    make_distribution(
        extra,
        "extras",
        "0.2",
        {"broken_methods": "import nope\n", "my_benchmarks_wide": PLUGIN_BENCHMARK},
        "[mesabench.methods]\nbroken = broken_methods:Broken\n"
        "[mesabench.benchmarks]\nsinusoid-wide = my_benchmarks_wide:WIDE\n",
    )
    return Path(f"{site}{os.pathsep}{extra}")


def test_the_guide_shows_the_installed_example_exactly():
    (module,) = [b for b in _blocks("python") if "class Reptile" in b]
    (toml,) = [b for b in _blocks("toml") if "mesabench.methods" in b]
    package = PLUGIN_PACKAGES / "my_methods"
    assert module == (package / "my_methods.py").read_text()
    # The whole file, not only the entry point: a reader can copy it and install.
    assert toml.strip() == (package / "pyproject.toml").read_text().strip()


@pytest.mark.slow  # end to end through several real CLI processes: with the long checks
def test_the_guides_method_runs_through_list_show_run_resume_and_leaderboard(
    plugin_site, run_cli, tmp_path, store
):
    env = {"PYTHONPATH": str(plugin_site)}
    listed = run_cli("list", "methods", **env)
    assert listed.returncode == 0
    row = next(line for line in listed.stdout.splitlines() if "reptile" in line)
    assert "my-methods 0.1" in row
    assert "plugin method 'broken' from extras 0.2 failed to load" in listed.stderr
    assert "ModuleNotFoundError" in listed.stderr
    shown = run_cli("show", "reptile", **env)
    assert shown.returncode == 0 and '"outer_lr": 1.0' in shown.stdout, shown.stderr
    # sinusoid-5shot gives every method inner_lr=0.01, but Reptile did not declare the
    # shared setting: its own 0.02 is kept.
    assert '"inner_lr": 0.02' in shown.stdout

    # A run interrupted after a checkpoint, then resumed to the end.
    budget = ["--set", "iterations=3000", "--set", "checkpoint_every=100", "--set",
              "log_every=200"]  # fmt: skip
    more = ["--set", "test_tasks=200", "--set", "meta_batch=10"]
    killed = interrupt_after_checkpoint(
        ["--method", "reptile", *budget, *more], tmp_path / "store", "sinusoid-5shot", **env
    )
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("sinusoid-5shot").experiment_id
    resumed = run_cli("run", "--resume", killed.info.run_id, "--tracking-uri", store, **env)
    assert resumed.returncode == 0, resumed.stderr
    (run,) = client.search_runs([experiment])
    assert run.info.status == "FINISHED"
    assert run.data.tags["mesabench.method_source"] == "my-methods 0.1"
    # Which code ran, not only the version: SHA-256 over the installed module (a top-level
    # module: its own file), recomputed here from the installed bytes.
    installed = Path(str(plugin_site).split(os.pathsep)[0]) / "my_methods.py"
    digest = hashlib.sha256(b"my_methods.py\0" + installed.read_bytes()).hexdigest()[:16]
    assert run.data.tags["mesabench.method_code"] == digest
    assert run.data.params["method.inner_lr"] == "0.02"
    # Counted without any help from the plugin: the MLP 1-40-40-1 has 1761 weights.
    assert run.data.metrics["final/num_params"] == 1761.0
    # The outer rate was annealed over the run's budget, through the resume: 1 - 2999/3000.
    assert run.data.metrics["train/outer_lr"] == pytest.approx(1 / 3000)
    # Reptile learns the family: predicting zero loses E[A^2]/2 ~ 4.2 (A ~ U(0.1, 5.0)).
    assert run.data.metrics["final/test_loss"] < 2.0

    board = run_cli("leaderboard", "--benchmark", "sinusoid-5shot", "--tracking-uri", store,
                    "--format", "csv", **env)  # fmt: skip
    assert board.returncode == 0, board.stderr
    assert "reptile" in board.stdout

    # A plugin benchmark, run by a built-in method; a broken plugin stops no built-in.
    wide = run_cli("run", "--method", "fomaml", "--benchmark", "sinusoid-wide",
                   "--tracking-uri", store, **env)  # fmt: skip
    assert wide.returncode == 0, wide.stdout + wide.stderr
    assert client.get_experiment_by_name("sinusoid-wide") is not None


def test_plugins_must_state_the_plugin_api_they_were_written_for(tmp_path, run_cli):
    from benchmarks.plugin_api import API_VERSION

    module = (PLUGIN_PACKAGES / "my_methods" / "my_methods.py").read_text()
    assert "api_version = 1" in module and API_VERSION == 1
    site = tmp_path / "site"
    make_distribution(
        site,
        "old-methods",
        "0.9",
        {
            "future": module.replace("api_version = 1", "api_version = 2"),
            "unstated": module.replace("api_version = 1", "pass"),
            "current": module,
        },
        "[mesabench.methods]\nfuture = future:Reptile\nunstated = unstated:Reptile\n"
        "current = current:Reptile\n",
    )
    listed = run_cli("list", "methods", PYTHONPATH=str(site))
    assert listed.returncode == 0
    assert (
        "method 'future' from old-methods 0.9 refused: written for plugin API 2, this "
        "mesabench 0.1.0 has plugin API 1"
    ) in listed.stderr
    assert (
        "method 'unstated' from old-methods 0.9 refused: it states no plugin API version; "
        "set api_version = 1 on the class"
    ) in listed.stderr
    names = {line.split("│")[1].strip() for line in listed.stdout.splitlines() if "│" in line}
    assert "current" in names and not {"future", "unstated"} & names
    refused = run_cli("run", "--method", "future", PYTHONPATH=str(site), cwd=tmp_path)
    assert refused.returncode == 2 and "unknown method 'future'" in refused.stderr


@pytest.mark.slow  # end to end through several real CLI processes: with the long checks
def test_a_plugin_taking_a_builtin_name_is_refused_alone(plugin_site, tmp_path, store, run_cli):
    other = tmp_path / "other"
    make_distribution(
        other,
        "copycat",
        "0.2",
        {"copycat": "from methods.gradient.maml import GradientMetaLearner\n"
                    "from benchmarks.catalog.specs import BenchmarkSpec, BENCHMARKS\n"
                    "import dataclasses\n"
                    "class Copy(GradientMetaLearner):\n"
                    "    api_version = 1\n"
                    "WRONG = dataclasses.replace(BENCHMARKS.get('sinusoid-5shot').value,\n"
                    "                            name='sinusoid-renamed', api_version=1)\n"},
        "[mesabench.methods]\nmaml = copycat:Copy\nmamlcopy = copycat:Copy\n"
        "[mesabench.benchmarks]\nsinusoid-typo = copycat:WRONG\n",
    )  # fmt: skip
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
    assert "reptile" not in result.stdout and "broken" not in result.stderr
    assert "plugins disabled" in result.stdout
    run = run_cli(
        "run",
        "--method",
        "reptile",
        PYTHONPATH=str(plugin_site),
        MESABENCH_DISABLE_PLUGINS="1",
        cwd=tmp_path,
    )
    assert run.returncode == 2 and "unknown method 'reptile'" in run.stderr


SHADOWING = """
from dataclasses import dataclass

from benchmarks.plugin_api import param
from my_methods import Reptile, ReptileConfig


@dataclass(frozen=True)
class SeededConfig(ReptileConfig):
    seed: int = param(0, help="would take --set seed=3 while the run stays seed 0")


@dataclass(frozen=True)
class ShotsConfig(ReptileConfig):
    shots: int = param(1, help="would make 'shots' ambiguous on every few-shot benchmark")
    iterations: int = param(3, help="and 'iterations' on every episodic one")


class Seeded(Reptile):
    Config = SeededConfig


class Shots(Reptile):
    Config = ShotsConfig
"""


def test_a_plugin_field_shadowing_the_suites_settings_is_refused_at_registration(
    tmp_path, run_cli, guide_site
):
    site = guide_site
    extra = tmp_path / "shadowing"
    make_distribution(extra, "shadows", "0.1", {"shadow_methods": SHADOWING},
                      "[mesabench.methods]\nseeded = shadow_methods:Seeded\n"
                      "shots = shadow_methods:Shots\n")  # fmt: skip
    listed = run_cli("list", "methods", PYTHONPATH=f"{site}{os.pathsep}{extra}")
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stderr.splitlines() if "refused" in line]
    assert any("'seeded' from shadows 0.1 refused: its config field(s) seed take names the "
               "suite uses ('seed' is reserved); rename them" in line for line in lines), lines
    assert any("'shots' from shadows 0.1 refused: its config field(s) iterations, shots"
               in line and "'iterations' is a setting of the episodic protocol" in line
               and "'shots' is a task setting of benchmark" in line for line in lines), lines
    # Refused alone: the guide's method from the same site is listed and still runs.
    assert "reptile" in listed.stdout and "seeded" not in listed.stdout


@pytest.mark.slow  # pip installs or real processes: with the long checks
def test_the_continual_guide_example_is_shown_exactly_installs_and_runs(tmp_path, run_cli):
    from tests.helpers import CONTINUAL_TINY
    from tests.image_fixtures import write_mnist

    package = PLUGIN_PACKAGES / "my_continual"
    assert (package / "my_continual.py").read_text() in _blocks("python")
    env = {"PYTHONPATH": str(install_plugin_package("my_continual", tmp_path))}
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    data = write_mnist(tmp_path / "data").parent
    done = run_cli("run", "--method", "online_ewc", "--benchmark", "mnist-rotations",
                   *CONTINUAL_TINY, "--data-root", str(data), "--tracking-uri", store,
                   **env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("mnist-rotations").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["mesabench.method_source"] == "my-continual 0.1"
    # Scored by the protocol: retained accuracy, the mean of the accuracy matrix's last row.
    matrix = client.download_artifacts(run.info.run_id, "accuracy_matrix.csv", str(tmp_path))
    last = Path(matrix).read_text().strip().splitlines()[-1].split(",")[1:]
    assert run.data.metrics["final/ra"] == pytest.approx(sum(map(float, last)) / len(last))


@pytest.mark.slow  # pip installs or real processes: with the long checks
def test_the_in_context_guide_example_is_shown_exactly_installs_and_learns(tmp_path, run_cli):
    package = PLUGIN_PACKAGES / "my_in_context"
    assert (package / "my_in_context.py").read_text() in _blocks("python")
    env = {"PYTHONPATH": str(install_plugin_package("my_in_context", tmp_path))}
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    done = run_cli("run", "--method", "delta_rule", "--benchmark", "linreg-icl", "--set",
                   "iterations=300", "--set", "test_tasks=2000", "--tracking-uri", store,
                   **env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("linreg-icl").experiment_id])
    assert run.data.tags["mesabench.method_source"] == "my-in-context 0.1"
    # It learns in context: the zero predictor loses 0.5 d E[x^2] = 1.667 on U(-1, 1), d = 10.
    assert run.data.metrics["final/test_loss"] < 0.8 * 1.667
    refused = run_cli("run", "--method", "delta_rule", "--benchmark", "omniglot-5w1s", **env)
    assert refused.returncode == 2 and "delta_rule needs flat regression" in refused.stderr


def test_a_plugin_variant_is_described_by_its_settings_or_its_own_words():
    """Two variants of one class were listed with the same line (the class docstring)."""
    from benchmarks.catalog.installed import describe_entry
    from methods.gradient.maml import GradientMetaLearner as MAML
    from methods.registry import MethodEntry

    plain = describe_entry(MethodEntry(MAML))
    assert plain and "(" not in plain
    variant = describe_entry(MethodEntry(MAML, {"first_order": True, "inner_steps": 3}))
    assert variant == f"{plain} (first_order=True, inner_steps=3)"
    assert describe_entry(MethodEntry(MAML, {"first_order": True}, "my FOMAML")) == "my FOMAML"
