"""Dependencies point down: datasets <- methods <- benchmarks, nothing below imports above.

(The datasets/ folder is imported as ``mesabench_datasets``.)"""

from __future__ import annotations

import ast

import pytest

from tests.helpers import ROOT

#: Folder -> import names it must not use.
ABOVE = {"datasets": ("methods", "benchmarks"), "methods": ("benchmarks",)}


def _imports(path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):  # module level and inside functions alike
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_no_module_imports_a_layer_above_it(package):
    offending = []
    for path in sorted((ROOT / package).glob("*.py")):
        for name in _imports(path):
            if name.split(".")[0] in ABOVE[package]:
                offending.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offending == []


def test_the_config_primitives_are_one_object_at_both_layers():
    import benchmarks.config
    import mesabench_datasets.typed_config

    assert benchmarks.config.ConfigError is mesabench_datasets.typed_config.ConfigError
    assert benchmarks.config.param is mesabench_datasets.typed_config.param


#: What the harness's generic parts may import from the layers below: the task-source and
#: Method abstractions, never a concrete dataset or a method's internals.
GENERIC_HARNESS = [
    *sorted((ROOT / "benchmarks" / "protocols").glob("*.py")),
    ROOT / "benchmarks" / "plots.py",
    ROOT / "benchmarks" / "leaderboards.py",
    ROOT / "benchmarks" / "leaderboard_formats.py",
    ROOT / "benchmarks" / "report.py",
    ROOT / "benchmarks" / "report_figures.py",
]
ALLOWED_BELOW = {
    "mesabench_datasets",
    "mesabench_datasets.tasks",
    "methods",
    "methods.api",
    "methods.registry",
    "methods.losses",  # the scoring functions (public: benchmarks.plugin_api)
    "methods.icl_figures",  # its series colours, so that one series has one colour everywhere
}


@pytest.mark.parametrize("path", GENERIC_HARNESS, ids=lambda p: p.name)
def test_protocols_plots_and_leaderboards_know_no_concrete_dataset_or_method(path):
    below = [n for n in _imports(path) if n.split(".")[0] in ("mesabench_datasets", "methods")]
    assert [n for n in below if n not in ALLOWED_BELOW] == []
    # ... nor name a benchmark's data sources in their code.
    text = path.read_text().lower()
    assert not [w for w in ("osaka", "omniglot", "mnist", "sinusoid") if f'"{w}' in text]
