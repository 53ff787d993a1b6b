"""Typed configuration sections and their validation at the edge.

Every configurable thing in the suite (a task source, a protocol, a method) is a frozen
dataclass. Fields declare their range with :func:`param`; ``Literal`` annotations declare
their allowed values. :func:`apply_overrides` turns ``key=value`` strings from the command
line into a new, validated config, or raises :class:`ConfigError` naming the field and what
is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

# The primitives live below every layer; re-exported here for the harness.
from mesabench_core import BadInput, ConfigError, as_dict, param


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin is tuple:
        args = get_args(tp)
        inner = _type_name(args[0]) if args else "value"
        return f"comma-separated {inner}s"
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def parse_value(tp: Any, text: str, field: str) -> Any:
    """Parse ``text`` as a value of annotation ``tp`` (int, float, bool, str, Literal, tuples)."""
    origin = get_origin(tp)
    if origin is Literal:
        for choice in get_args(tp):
            if str(choice) == text:
                return choice
        raise ConfigError(f"{field} must be {_type_name(tp)} (got {text!r})")
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if type(None) in args and text.lower() in ("none", "null", ""):
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return parse_value(arg, text, field)
            except ConfigError:
                continue
        raise ConfigError(f"{field} must be {_type_name(tp)} (got {text!r})")
    if origin is tuple:
        args = get_args(tp)
        parts = [p for p in text.replace("(", "").replace(")", "").split(",") if p.strip()]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(parse_value(args[0], p.strip(), field) for p in parts)
        if len(parts) != len(args):
            raise ConfigError(f"{field} must be {len(args)} comma-separated values (got {text!r})")
        return tuple(parse_value(a, p.strip(), field) for a, p in zip(args, parts, strict=True))
    if tp is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{field} must be true or false (got {text!r})")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{field} must be an integer (got {text!r})") from None
    if tp is float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{field} must be a number (got {text!r})") from None
        if not math.isfinite(value):
            raise ConfigError(f"{field} must be a finite number (got {text!r})")
        return value
    if tp is str:
        return text
    raise ConfigError(f"{field} cannot be set from the command line")


def coerce_value(tp: Any, value: Any, field: str) -> Any:
    """A Python value (from the Python API) as a value of annotation ``tp``: strings are
    parsed like the command line's; lists become tuples; ints are accepted for floats."""
    if isinstance(value, str):
        return parse_value(tp, value, field)
    if isinstance(value, list):
        value = tuple(value)
    if _matches(tp, value):
        whole = isinstance(value, int) and not isinstance(value, bool)
        if whole and _matches(tp, 0.5) and not _takes_int(tp):
            value = float(value)  # 3 for a float field is 3.0, as "3" would be
        return value
    raise ConfigError(f"{field} must be {_type_name(tp)} (got {value!r})")


def _takes_int(tp: Any) -> bool:
    if get_origin(tp) in (Union, types.UnionType):
        return any(_takes_int(a) for a in get_args(tp))
    return tp is int


def _matches(tp: Any, value: Any) -> bool:
    origin = get_origin(tp)
    if origin is Literal:
        return value in get_args(tp)
    if origin in (Union, types.UnionType):
        return any(_matches(a, value) for a in get_args(tp))
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(args[0], v) for v in value)
        return len(args) == len(value) and all(
            _matches(a, v) for a, v in zip(args, value, strict=True)
        )
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _numbers(value: Any) -> list[float]:
    if isinstance(value, tuple):
        return [v for v in value if isinstance(v, (int, float))]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value]
    return []


def validate(config: Any, prefix: str = "") -> None:
    """Check every field's type and range, then the section's own ``check()`` if it has one."""
    hints = get_type_hints(type(config))
    for f in dataclasses.fields(config):
        name = f"{prefix}{f.name}"
        value = getattr(config, f.name)
        tp = hints[f.name]
        if not _matches(tp, value):
            raise ConfigError(f"{name} must be {_type_name(tp)} (got {value!r})")
        lo, hi = f.metadata.get("min"), f.metadata.get("max")
        for number in _numbers(value):
            if not math.isfinite(number):
                raise ConfigError(f"{name} must be a finite number (got {value!r})")
            if lo is not None and number < lo:
                raise ConfigError(f"{name} must be >= {lo} (got {value!r})")
            if hi is not None and number > hi:
                raise ConfigError(f"{name} must be <= {hi} (got {value!r})")
    check = getattr(config, "check", None)
    if callable(check):
        try:
            check()
        except ConfigError as err:
            # A check may already name its field in full (a plugin's "method.x has no
            # effect ..."): the section is said once.
            said = str(err)
            raise ConfigError(said if said.startswith(prefix) else f"{prefix}{said}") from None


def parse_pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` command-line items as a dict (``flag`` names the option in errors)."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} expects KEY=VALUE (got {item!r})")
        pairs[key.strip()] = value.strip()
    return pairs


def field_names(config: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(config)]


def route(sections: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Which field of which section each key of ``overrides`` sets, with its value parsed:
    section -> {field: value}. Nothing is applied or validated beyond the value's type.

    Keys are either qualified (``method.inner_lr``) or bare (``inner_lr``); a bare key must
    name a field in exactly one section. Values are command-line strings or Python values
    (bool, int, float, str, tuple, list).
    """
    changes: dict[str, dict[str, Any]] = {name: {} for name in sections}
    for key, text in overrides.items():
        section, _, field = key.rpartition(".")
        if section:
            if section not in sections:
                raise ConfigError(
                    f"unknown section {section!r} in {key!r}; allowed: {', '.join(sections)}"
                )
            candidates = [section] if field in field_names(sections[section]) else []
        else:
            candidates = [s for s, cfg in sections.items() if field in field_names(cfg)]
        if not candidates:
            every = [f"{s}.{f}" for s, cfg in sections.items() for f in field_names(cfg)]
            near = difflib.get_close_matches(key, every, n=3) or difflib.get_close_matches(
                field, [e.rpartition(".")[2] for e in every], n=3
            )
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise ConfigError(f"unknown setting {key!r}{hint} (see 'show' for all settings)")
        if len(candidates) > 1:
            raise ConfigError(
                f"setting {key!r} is ambiguous; write one of "
                + ", ".join(f"{c}.{field}" for c in candidates)
            )
        target = candidates[0]
        tp = get_type_hints(type(sections[target]))[field]
        changes[target][field] = coerce_value(tp, text, f"{target}.{field}")
    return changes


def apply_overrides(sections: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Return new config sections with ``overrides`` applied (see :func:`route`) and every
    section validated."""
    changes = route(sections, overrides)
    result = {}
    for name, cfg in sections.items():
        new = dataclasses.replace(cfg, **changes[name]) if changes[name] else cfg
        validate(new, prefix=f"{name}.")
        result[name] = new
    return result


def from_dict(cls: type, values: Mapping[str, Any]) -> Any:
    """Rebuild a config from a JSON dict (lists become tuples again)."""
    hints = get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            value = values[f.name]
            if isinstance(value, list) or get_origin(hints[f.name]) is tuple and value is not None:
                value = tuple(value)
            kwargs[f.name] = value
    return cls(**kwargs)


__all__ = [
    "BadInput",
    "ConfigError",
    "param",
    "parse_value",
    "validate",
    "apply_overrides",
    "route",
    "as_dict",
    "from_dict",
]
