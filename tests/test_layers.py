"""Dependencies point down: core <- datasets <- methods <- benchmarks, and no module imports
one that imports it back, directly or through others, at module level or inside a function.

(The datasets/ folder is imported as ``mesabench_datasets``, core/ as ``mesabench_core``.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

#: Folder -> its import name.
PACKAGES = {"core": "mesabench_core", "datasets": "mesabench_datasets", "methods": "methods",
            "benchmarks": "benchmarks"}  # fmt: skip
#: Folder -> import names it must not use.
ABOVE = {
    "core": ("mesabench_datasets", "methods", "benchmarks"),
    "datasets": ("methods", "benchmarks"),
    "methods": ("benchmarks",),
}
#: The rooms of benchmarks/, lowest first: a room imports only from rooms before it (and
#: the package's public faces at the top, which nothing inside imports).
ROOMS = ["metrics", "protocols", "catalog", "planning", "store", "running", "results", "sweeps",
         "published", "cli"]  # fmt: skip
FACES = {"benchmarks", "benchmarks.__main__", "benchmarks.plugin_api", "benchmarks.python_api"}
#: The rooms of methods/, lowest first, on the contract every room builds on (``methods.api``,
#: ``methods.registry``); the package itself (which registers the built-ins) is its face.
METHOD_ROOMS = ["common", "gradient", "continual", "reference", "layers", "analyses",
                "in_context", "peers"]  # fmt: skip
METHOD_FACES = {"methods"}


def _module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    parts = [PACKAGES[folder], *path.relative_to(ROOT / folder).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, at module level and inside functions alike: for
    ``from package import name`` the submodule when ``name`` is one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.append(sub if sub in MODULES else base)
    return names


def _graph() -> dict[str, set[str]]:
    return {
        name: {n for n in _imports(path) if n in MODULES and n != name}
        for name, path in MODULES.items()
    }


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_no_module_imports_a_layer_above_it(package):
    offending = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in _imports(path):
            if name.split(".")[0] in ABOVE[package]:
                offending.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offending == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_anywhere_not_even_inside_functions():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def _room(module: str, package: str = "benchmarks") -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == package and len(parts) > 2 else None


@pytest.mark.parametrize("package, rooms, faces", [("benchmarks", ROOMS, FACES),
                                                   ("methods", METHOD_ROOMS, METHOD_FACES)])
def test_the_rooms_of_each_package_import_only_downwards(package, rooms, faces):
    offending = []
    for name, targets in _graph().items():
        room = _room(name, package)
        if room is None:
            continue
        for target in targets:
            if target in faces:
                offending.append(f"{name} imports the face {target}")
            below = _room(target, package)
            if below is not None and rooms.index(below) > rooms.index(room):
                offending.append(f"{name} ({room}) imports {target} ({below})")
    assert offending == []


@pytest.mark.parametrize("package, rooms, loose", [
    ("benchmarks", ROOMS, {"__init__", "__main__", "plugin_api", "python_api"}),
    ("methods", METHOD_ROOMS, {"__init__", "api", "registry"}),
])  # fmt: skip
def test_every_room_is_a_folder_and_nothing_else_lies_loose(package, rooms, loose):
    assert {p.stem for p in (ROOT / package).glob("*.py")} == loose
    folders = {p.name for p in (ROOT / package).iterdir() if (p / "__init__.py").exists()}
    assert folders == set(rooms)
    for room in rooms:  # each room says in one line what lives there
        doc = ast.get_docstring(ast.parse((ROOT / package / room / "__init__.py").read_text()))
        assert doc and (package == "benchmarks" or len(doc.splitlines()) == 1), room


def test_the_shared_basics_are_one_object_at_every_layer():
    import benchmarks.plugin_api
    import mesabench_core
    import mesabench_datasets.data_root
    import methods.api
    import methods.registry

    assert benchmarks.plugin_api.ConfigError is mesabench_core.ConfigError
    assert benchmarks.plugin_api.param is mesabench_core.param
    assert methods.registry.Registry is mesabench_core.Registry
    assert methods.api.IncompatibleSetting is mesabench_core.IncompatibleSetting
    assert mesabench_datasets.data_root.DataNotFoundError is mesabench_core.DataNotFoundError
    for kind in ("ConfigError", "RegistryError", "DataNotFoundError", "DatasetFormatError",
                 "IncompatibleSetting"):  # fmt: skip
        assert issubclass(getattr(mesabench_core, kind), mesabench_core.BadInput), kind


#: What the harness's generic parts may import from the layers below: the task-source and
#: Method abstractions, never a concrete dataset or a method's internals.
GENERIC_HARNESS = [
    *sorted((ROOT / "benchmarks" / "protocols").glob("*.py")),
    *sorted((ROOT / "benchmarks" / "results").glob("*.py")),
]
ALLOWED_BELOW = {
    "mesabench_core",
    "mesabench_datasets",
    "mesabench_datasets.tasks",
    "methods",
    "methods.api",
    "methods.registry",
    "methods.common.losses",  # the scoring functions (public: benchmarks.plugin_api)
    "methods.analyses.figures",  # its series colours, so that one series has one colour everywhere
}


@pytest.mark.parametrize("path", GENERIC_HARNESS, ids=lambda p: p.name)
def test_protocols_plots_and_leaderboards_know_no_concrete_dataset_or_method(path):
    below = [n for n in _imports(path) if n.split(".")[0] in ("mesabench_datasets", "methods")]
    assert [n for n in below if n not in ALLOWED_BELOW] == []
    # ... nor name a benchmark's data sources in their code.
    text = path.read_text().lower()
    assert not [w for w in ("osaka", "omniglot", "mnist", "sinusoid") if f'"{w}' in text]


def test_no_two_paths_differ_only_in_case():
    """On a case-insensitive checkout (macOS, Windows) one of two such files overwrites the
    other: every tracked path, folders included, is unique without its case."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")  # fmt: skip
    paths = {p for p in listed if p}
    paths |= {str(Path(p).parents[i]) for p in paths for i in range(len(Path(p).parents) - 1)}
    by_fold: dict[str, set[str]] = {}
    for path in paths:
        by_fold.setdefault(path.casefold(), set()).add(path)
    assert [sorted(v) for v in by_fold.values() if len(v) > 1] == []
