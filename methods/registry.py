"""Name -> thing registries with suggestions, sources and conflict detection.

Built-ins register in code (``register_method``); plugins are added by
``benchmarks.plugins`` from entry points. A plugin that takes a built-in's name is refused
alone: the built-in keeps working and the refusal is reported. Two plugins that take one
name are kept as a conflict that names both sources, so the suite never silently picks one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

BUILTIN = "built-in"


class RegistryError(LookupError):
    """An unknown or conflicting name (bad user input)."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    value: T
    source: str = BUILTIN
    description: str = ""


@dataclass
class Registry(Generic[T]):
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

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self.entries.values(), key=lambda e: e.name))


@dataclass(frozen=True)
class MethodEntry:
    """A method class plus the config defaults that make it a named variant."""

    cls: type
    defaults: dict[str, Any] = field(default_factory=dict)


METHODS: Registry[MethodEntry] = Registry("method")


def register_method(name: str, cls: type, description: str = "", **defaults: Any) -> None:
    """Register a built-in method: ``cls`` with config ``defaults`` under ``name``."""
    METHODS.add(name, MethodEntry(cls, dict(defaults)), BUILTIN, description)
