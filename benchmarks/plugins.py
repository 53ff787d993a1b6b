"""Third-party methods and benchmarks from entry points, with an off-switch.

A distribution adds a method with one line in its own ``pyproject.toml``::

    [project.entry-points."mesabench.methods"]
    my_method = "my_package.module:MyMethod"

``MESABENCH_DISABLE_PLUGINS=1`` turns plugin loading off. A plugin that fails to import, or
states no plugin API version or another one than ``benchmarks.plugin_api.API_VERSION``, is
reported with its name and the reason; every other method still works.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

import benchmarks
from methods.api import Method
from methods.registry import METHODS, MethodEntry, RegistryError

METHOD_GROUP = "mesabench.methods"
BENCHMARK_GROUP = "mesabench.benchmarks"
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


def _method_entry(obj: object, name: str) -> MethodEntry:
    if isinstance(obj, MethodEntry):
        return obj
    if inspect.isclass(obj) and issubclass(obj, Method):
        return MethodEntry(obj)
    raise TypeError(f"entry point {name!r} is not a mesabench Method subclass")


def check_api_version(stated: object, kind: str, name: str, source: str) -> None:
    """Refuse a plugin written for no stated or another plugin API version."""
    from benchmarks.plugin_api import API_VERSION

    if stated is None:
        where = "on the class" if kind == "method" else "in its BenchmarkSpec"
        raise RegistryError(
            f"{kind} {name!r} from {source} refused: it states no plugin API version; set "
            f"api_version = {API_VERSION} {where} (the benchmarks.plugin_api it was written for)"
        )
    if stated != API_VERSION:
        raise RegistryError(
            f"{kind} {name!r} from {source} refused: written for plugin API {stated}, this "
            f"mesabench {benchmarks.__version__} has plugin API {API_VERSION}"
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


def load_plugins() -> list[str]:
    """Register every plugin once; returns the list of plugin errors."""
    global _loaded
    if _loaded or plugins_disabled():
        _loaded = True
        return PLUGIN_ERRORS
    _loaded = True
    from benchmarks.specs import BenchmarkSpec, register_benchmark

    def add_method(name: str, obj: object, source: str) -> None:
        entry = _method_entry(obj, name)
        version = getattr(entry.cls, "api_version", None)
        check_api_version(version, "method", name, source)
        METHODS.add(name, entry, source, _first_line(entry.cls))

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

    _load_group(METHOD_GROUP, "method", add_method)
    _load_group(BENCHMARK_GROUP, "benchmark", add_benchmark)
    return PLUGIN_ERRORS
