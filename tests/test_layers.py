"""Dependencies point down: datasets <- methods <- benchmarks, nothing below imports above."""

from __future__ import annotations

import ast

import pytest

from tests.helpers import ROOT

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
    import datasets.typed_config

    assert benchmarks.config.ConfigError is datasets.typed_config.ConfigError
    assert benchmarks.config.param is datasets.typed_config.param
