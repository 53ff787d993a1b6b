"""Third-party methods and benchmarks from entry points, with an off-switch.

A distribution adds a method with one line in its own ``pyproject.toml``::

    [project.entry-points."mesabench.methods"]
    my_method = "my_package.module:MyMethod"

``MESABENCH_DISABLE_PLUGINS=1`` turns plugin loading off. A plugin that fails to import is
reported with its name and error; every other method still works.
"""

from __future__ import annotations

import inspect
import os
from importlib.metadata import EntryPoint, entry_points

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


def load_plugins() -> list[str]:
    """Register every plugin once; returns the list of plugin errors."""
    global _loaded
    if _loaded or plugins_disabled():
        _loaded = True
        return PLUGIN_ERRORS
    _loaded = True
    from benchmarks.specs import BenchmarkSpec, register_benchmark

    for ep in entry_points(group=METHOD_GROUP):
        source = _source(ep)
        try:
            obj = ep.load()
            if isinstance(obj, MethodEntry):
                entry = obj
            elif inspect.isclass(obj) and issubclass(obj, Method):
                entry = MethodEntry(obj)
            else:
                raise TypeError(f"{ep.value} is not a mesabench Method subclass")
            METHODS.add(ep.name, entry, source, _first_line(entry.cls))
        except RegistryError as err:
            PLUGIN_ERRORS.append(f"plugin method {ep.name!r}: {err}")
        except Exception as err:  # a broken plugin must not take the suite down
            PLUGIN_ERRORS.append(
                f"plugin method {ep.name!r} from {source} failed to load: "
                f"{type(err).__name__}: {err}"
            )
    for ep in entry_points(group=BENCHMARK_GROUP):
        source = _source(ep)
        try:
            spec = ep.load()
            if not isinstance(spec, BenchmarkSpec):
                raise TypeError(f"{ep.value} is not a BenchmarkSpec")
            register_benchmark(spec, source)
        except RegistryError as err:
            PLUGIN_ERRORS.append(f"plugin benchmark {ep.name!r}: {err}")
        except Exception as err:
            PLUGIN_ERRORS.append(
                f"plugin benchmark {ep.name!r} from {source} failed to load: "
                f"{type(err).__name__}: {err}"
            )
    return PLUGIN_ERRORS
