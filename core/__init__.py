"""The basics every layer shares, below all of them (``core`` <- ``datasets`` <-
``methods`` <- ``benchmarks``); installed as ``mesabench_core``.

- :class:`BadInput`, the one family of "the user's input is wrong" errors: the command line
  answers any of them with one line and exit code 2, before anything is recorded. Each
  layer's own kinds (:class:`ConfigError`, :class:`RegistryError`, a data file that is
  missing or malformed, a setting a method cannot take) derive from it.
- :func:`param`, a validated dataclass field.
- :class:`Registry`, name -> thing with suggestions, sources and conflict detection.
- The common types of the seams between layers (:data:`Sections`, :data:`Settings`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: The suite's version, recorded with every run (``mesabench.version``).
__version__ = "0.1.0"

#: A run's configuration sections by name (``method``, ``task``, ``protocol``): frozen
#: dataclasses, validated by the harness.
Sections = Mapping[str, Any]
#: Settings as a user gives them: ``key`` or ``section.key`` -> a command-line string or a
#: Python value.
Settings = Mapping[str, Any]
#: A plan's keys that say nothing of its configuration: where and with which seed it runs.
#: A configuration's hash leaves them out, and the store reader relies on that.
RUN_LOCAL_SETTINGS = ("seed", "device", "data_root")


# -- bad input -------------------------------------------------------------------------------
class BadInput(ValueError):
    """The user's input is wrong: one line naming what and what is allowed; exit code 2 on
    the command line, nothing written."""


class ConfigError(BadInput):
    """A setting, a flag or a file the suite was given is not allowed."""


class RegistryError(BadInput, LookupError):
    """An unknown or conflicting name of a method, benchmark or other registered thing."""


class DataNotFoundError(BadInput, FileNotFoundError):
    """A dataset file is not where the suite looked; the message says where and what to do."""


class DatasetFormatError(BadInput):
    """A dataset file exists but is not in a form the suite reads."""


class IncompatibleSetting(BadInput):
    """A setting that cannot work on the benchmark's problem (e.g. an MLP on images). Raised
    by ``Method.check_config``; reported in one line before anything is recorded."""


# -- validated fields -------------------------------------------------------------------------
def param(default: Any, *, min: float | None = None, max: float | None = None, help: str = "",
          added: str | None = None):  # fmt: skip
    """A dataclass field with an allowed range and a one-line description.

    ``added`` (the version that brought the field) marks a field added to a config that runs
    were already recorded with: while it holds its default it is left out of the plan's
    identity (:func:`identity_dict`), so that those runs keep their cells and rows.
    """
    meta = {"min": min, "max": max, "help": help, "added": added}
    return dataclasses.field(default=default, metadata=meta)


def as_dict(config: Any) -> dict[str, Any]:
    """A config dataclass's fields by name (one level: values are kept as they are)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def identity_dict(config: Any) -> dict[str, Any]:
    """The fields that identify a configuration: :func:`as_dict` without the fields added
    later (``param(added=...)``) that still hold their default."""
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if not (f.metadata.get("added") and getattr(config, f.name) == f.default)
    }


# -- registries -------------------------------------------------------------------------------
BUILTIN = "built-in"


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    value: T
    source: str = BUILTIN
    description: str = ""


@dataclass
class Registry(Generic[T]):
    """Name -> thing. Built-ins register in code; plugins are added from entry points. A
    plugin that takes a built-in's name is refused alone (the built-in keeps working); two
    plugins that take one name are kept as a conflict naming both, so that the suite never
    silently picks one."""

    kind: str
    entries: dict[str, Entry[T]] = field(default_factory=dict)
    conflicts: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, value: T, source: str = BUILTIN, description: str = "") -> None:
        if name in self.entries:
            first = self.entries[name].source
            if first == BUILTIN and source != BUILTIN:
                raise RegistryError(
                    f"{self.kind} {name!r} from {source} refused: the name is a built-in's "
                    f"(the built-in {name!r} is used); register it under another name"
                )
            self.conflicts.setdefault(name, [first]).append(source)
            raise RegistryError(
                f"{self.kind} {name!r} is defined twice: by {first} and by {source}"
            )
        self.entries[name] = Entry(name, value, source, description)

    def get(self, name: str) -> Entry[T]:
        if name in self.conflicts:
            sources = " and ".join(self.conflicts[name])
            raise RegistryError(
                f"{self.kind} {name!r} is defined twice ({sources}); uninstall one, or set "
                "MESABENCH_DISABLE_PLUGINS=1 to use the built-in"
            )
        if name not in self.entries:
            near = difflib.get_close_matches(name, list(self.entries), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise RegistryError(
                f"unknown {self.kind} {name!r}{hint} (allowed: {', '.join(sorted(self.entries))})"
            )
        return self.entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self.entries.values(), key=lambda e: e.name))


__all__ = [
    "BUILTIN",
    "BadInput",
    "ConfigError",
    "DataNotFoundError",
    "DatasetFormatError",
    "Entry",
    "IncompatibleSetting",
    "RUN_LOCAL_SETTINGS",
    "Registry",
    "RegistryError",
    "Sections",
    "Settings",
    "__version__",
    "as_dict",
    "identity_dict",
    "param",
]
