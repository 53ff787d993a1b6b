"""What is installed: the built-in methods and benchmarks, and third-party ones (and
gradient modulations) from entry points, with an off-switch; names looked up here.

A distribution adds a method with one line in its own ``pyproject.toml``::

    [project.entry-points."mesabench.methods"]
    my_method = "my_package.module:MyMethod"

(``mesabench.benchmarks`` for a ``BenchmarkSpec``, ``mesabench.modulations`` for a
``GradientModulation`` subclass with a ``from_settings`` class method.)

``MESABENCH_DISABLE_PLUGINS=1`` turns plugin loading off. A plugin that fails to import, or
states no plugin API version or another one than ``benchmarks.plugin_api.API_VERSION``, is
reported with its name and the reason; every other method still works.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import inspect
import logging
import os
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from benchmarks.catalog.specs import BENCHMARKS, BenchmarkSpec, register_benchmark
from benchmarks.protocols import PROTOCOLS
from mesabench_core import __version__
from methods.api import Method
from methods.gradient.modulation import GradientModulation, register_modulation
from methods.registry import METHODS, MethodEntry, RegistryError

#: Major version of the plugin surface (``benchmarks.plugin_api``, which re-exports it):
#: plugins state the one they were written for, and the registry checks it here.
API_VERSION = 1

METHOD_GROUP = "mesabench.methods"
BENCHMARK_GROUP = "mesabench.benchmarks"
MODULATION_GROUP = "mesabench.modulations"
DISABLE_ENV = "MESABENCH_DISABLE_PLUGINS"

_loaded = False
#: One line per plugin that could not be registered.
PLUGIN_ERRORS: list[str] = []


def plugins_disabled() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _source(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.metadata['Name']} {dist.version}" if dist is not None else f"plugin {ep.value}"


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.splitlines()[0] if doc else ""


def describe_entry(entry: MethodEntry) -> str:
    """A plugin method's line in ``list methods``: its own description, else its class'
    first docstring line with the settings that make it a variant (two variants of one
    class were listed alike)."""
    if entry.description:
        return entry.description
    made_of = ", ".join(f"{key}={value}" for key, value in sorted(entry.defaults.items()))
    return " ".join(part for part in (_first_line(entry.cls), made_of and f"({made_of})") if part)


def _method_entry(obj: object, name: str) -> MethodEntry:
    if isinstance(obj, MethodEntry):
        return obj
    if inspect.isclass(obj) and issubclass(obj, Method):
        return MethodEntry(obj)
    raise TypeError(f"entry point {name!r} is not a mesabench Method subclass")


def check_api_version(stated: object, kind: str, name: str, source: str) -> None:
    """Refuse a plugin written for no stated or another plugin API version."""
    if stated is None:
        where = "in its BenchmarkSpec" if kind == "benchmark" else "on the class"
        raise RegistryError(
            f"{kind} {name!r} from {source} refused: it states no plugin API version; set "
            f"api_version = {API_VERSION} {where} (the benchmarks.plugin_api it was written for)"
        )
    if stated != API_VERSION:
        raise RegistryError(
            f"{kind} {name!r} from {source} refused: written for plugin API {stated}, this "
            f"mesabench {__version__} has plugin API {API_VERSION}"
        )


#: Names a run's plan and command line give a meaning of their own: no method setting may
#: take one (``--set seed=3`` must never set a plugin's field while the run stays seed 0).
RESERVED_SETTINGS = frozenset({
    "seed", "device", "benchmark", "method", "method_name", "preset", "data_root",
    "learner_from", "resume", "parent", "tracking_uri", "exclusive",
})  # fmt: skip


def check_setting_names(entry: MethodEntry, name: str, source: str) -> None:
    """Refuse a plugin method whose config fields take a reserved name, or a protocol's or
    a benchmark's task setting (a bare ``--set`` of it would be ambiguous, and the
    benchmarks' own presets would fail)."""
    fields = {f.name for f in dataclasses.fields(entry.cls.Config)}
    taken = {
        **{key: "reserved" for key in RESERVED_SETTINGS},
        **{f.name: f"a setting of the {protocol.name} protocol"
           for protocol in PROTOCOLS.values() if protocol.Config
           for f in dataclasses.fields(protocol.Config)},  # fmt: skip
        **{f.name: f"a task setting of benchmark {spec.name}"
           for spec in (e.value for e in BENCHMARKS) for f in dataclasses.fields(spec.task)},
    }  # fmt: skip
    clashes = sorted(fields & set(taken))
    if clashes:
        said = "; ".join(f"{key!r} is {taken[key]}" for key in clashes)
        raise RegistryError(
            f"method {name!r} from {source} refused: its config field(s) {', '.join(clashes)} "
            f"take names the suite uses ({said}); rename them"
        )


def _load_group(group: str, kind: str, register: Callable[[str, object, str], None]) -> None:
    for ep in entry_points(group=group):
        source = _source(ep)
        try:
            register(ep.name, ep.load(), source)
        except RegistryError as err:
            PLUGIN_ERRORS.append(f"plugin {kind} {ep.name!r}: {err}")
        except Exception as err:  # a broken plugin must not take the suite down
            PLUGIN_ERRORS.append(
                f"plugin {kind} {ep.name!r} from {source} failed to load: "
                f"{type(err).__name__}: {err}"
            )


def report_plugin_errors() -> None:
    """Log each plugin that was refused or failed to load, one line each (after loading)."""
    for line in load_plugins():
        logging.getLogger("mesabench").warning(line)


def load_plugins() -> list[str]:
    """Register every plugin once; returns the list of plugin errors."""
    global _loaded
    if _loaded or plugins_disabled():
        _loaded = True
        return PLUGIN_ERRORS
    _loaded = True
    def add_method(name: str, obj: object, source: str) -> None:
        entry = _method_entry(obj, name)
        version = getattr(entry.cls, "api_version", None)
        check_api_version(version, "method", name, source)
        check_setting_names(entry, name, source)
        METHODS.add(name, entry, source, describe_entry(entry))

    def add_benchmark(name: str, obj: object, source: str) -> None:
        if not isinstance(obj, BenchmarkSpec):
            raise TypeError(f"entry point {name!r} is not a BenchmarkSpec")
        check_api_version(obj.api_version, "benchmark", name, source)
        if obj.name != name:  # the user types the entry point's name; the spec names the runs
            raise RegistryError(
                f"entry point {name!r} from {source} holds benchmark spec {obj.name!r}; the "
                "two names must agree (not registered)"
            )
        register_benchmark(obj, source)

    def add_modulation(name: str, obj: object, source: str) -> None:
        if not (inspect.isclass(obj) and issubclass(obj, GradientModulation)
                and callable(getattr(obj, "from_settings", None))):  # fmt: skip
            raise TypeError(f"entry point {name!r} is not a GradientModulation subclass with a "
                            "from_settings(settings) class method")  # fmt: skip
        check_api_version(getattr(obj, "api_version", None), "gradient modulation", name, source)
        register_modulation(name, obj.from_settings, _first_line(obj), source)

    _load_group(METHOD_GROUP, "method", add_method)
    _load_group(BENCHMARK_GROUP, "benchmark", add_benchmark)
    _load_group(MODULATION_GROUP, "gradient modulation", add_modulation)
    return PLUGIN_ERRORS


@functools.cache
def code_digest(cls: type) -> str:
    """SHA-256 (16 hex digits) of the Python source that defines ``cls``, by relative path.
    A plugin: every ``.py`` file under its top-level package (the module's own file for a
    top-level module). A built-in: its module and every module of ``methods`` it imports,
    at any depth (:func:`_imported_closure`), so that an edit to one learner leaves the
    others' runs poolable. Every run records it, so that rows of runs made with different
    code under one version number are never pooled."""
    top = sys.modules.get(cls.__module__.split(".")[0])
    folders = [Path(p) for p in getattr(top, "__path__", [])]
    if cls.__module__.startswith(f"{BUILT_IN_PACKAGE}.") and folders:
        files = [(path.relative_to(folders[0]), path)
                 for path in _imported_closure(cls.__module__, folders[0])]  # fmt: skip
    elif folders:
        files = [(f.relative_to(folder), f) for folder in folders
                 for f in sorted(folder.rglob("*.py"))]  # fmt: skip
    else:
        path = Path(inspect.getsourcefile(cls) or "")
        files = [(Path(path.name), path)] if path.is_file() else []
    digest = hashlib.sha256()
    for name, path in sorted(files):
        digest.update(f"{name.as_posix()}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


#: The package of the built-in methods.
BUILT_IN_PACKAGE = "methods"


def _imported_closure(module: str, root: Path) -> list[Path]:
    """The files of ``module`` (under the package folder ``root``) and of every module of
    the package its source imports (at the top or inside a function), transitively. The
    package's ``__init__`` files are left out: they only register and re-export (the
    top one imports every learner)."""

    def file_of(name: str) -> Path | None:
        package, *parts = name.split(".")
        if package != root.name or not parts:  # another package's module (torch.nn, ...)
            return None
        path = root.joinpath(*parts).with_suffix(".py")
        return path if path.is_file() else None

    found: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = file_of(name)
        if name in found or path is None:
            continue
        found[name] = path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return [found[name] for name in sorted(found)]


def method_entry(name: str) -> MethodEntry:
    load_plugins()
    return METHODS.get(name).value


def benchmark_spec(name: str) -> BenchmarkSpec:
    load_plugins()
    return BENCHMARKS.get(name).value


#: Columns for a benchmark whose spec is not installed (its runs remain in the store).
GENERIC_HEADLINE = ("final/test_accuracy|final/test_loss",)


def headline_of(benchmark: str) -> tuple[str, ...]:
    """The benchmark's declared default columns (its spec's, else its protocol's); the
    generic ones when its spec is not installed."""
    try:
        spec = benchmark_spec(benchmark)
    except RegistryError:
        return GENERIC_HEADLINE
    return spec.headline or PROTOCOLS[spec.protocol_name].headline
