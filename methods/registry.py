"""The method registry: built-ins register in code (``register_method``); plugins are
added from entry points by ``benchmarks.catalog.installed``. The generic
:class:`~mesabench_core.Registry` is the core's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mesabench_core import BUILTIN, Entry, Registry, RegistryError

__all__ = ["BUILTIN", "METHODS", "Entry", "MethodEntry", "Registry", "RegistryError",
           "register_method"]  # fmt: skip


@dataclass(frozen=True)
class MethodEntry:
    """A method class plus the config defaults that make it a named variant."""

    cls: type
    defaults: dict[str, Any] = field(default_factory=dict)
    #: What ``list methods`` says of it (a plugin's; built-ins give theirs to
    #: ``register_method``). Empty: the class docstring's first line, and a variant's settings.
    description: str = ""


METHODS: Registry[MethodEntry] = Registry("method")


def register_method(name: str, cls: type, description: str = "", **defaults: Any) -> None:
    """Register a built-in method: ``cls`` with config ``defaults`` under ``name``."""
    METHODS.add(name, MethodEntry(cls, dict(defaults)), BUILTIN, description)
