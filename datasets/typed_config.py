"""The two configuration primitives every layer shares: :class:`ConfigError` and
:func:`param`.

They live at the bottom (``datasets`` <- ``methods`` <- ``benchmarks``) so that task sources
and methods can declare validated settings without importing the harness above them.
Parsing, validation and override resolution are the harness's (``benchmarks.config``,
which re-exports both names).
"""

from __future__ import annotations

import dataclasses
from typing import Any


class ConfigError(ValueError):
    """Bad user input: one line, naming the field and the allowed values."""


def param(default: Any, *, min: float | None = None, max: float | None = None, help: str = ""):
    """A dataclass field with an allowed range and a one-line description."""
    return dataclasses.field(default=default, metadata={"min": min, "max": max, "help": help})
