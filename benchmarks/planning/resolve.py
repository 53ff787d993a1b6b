"""A run's settings, resolved once over an explicit, ordered list of layers.

Lowest first (a later layer wins):

=====  ===============================================  ==========  =====================
layer  what it is                                       sections    unknown key
=====  ===============================================  ==========  =====================
0      the method's ``Config`` defaults; the benchmark   all         (none: the base)
       spec's task and protocol
1      the task source's defaults for every method       method      taken only where the
       (e.g. linreg's optimal one-step rate for the                  method declares the
       resolved input range)                                         shared setting
2      the benchmark's defaults for every method         method      same as layer 1
3      the method's registered variant (what makes       method      an error naming it
       ``sparse_maml`` sparse)
4      the benchmark's settings for this very method     method      an error naming it
5      the preset (``--preset``), if any                 all         an error naming it
6      the user's settings (``--set``, keyword args)     all         an error
=====  ===============================================  ==========  =====================

Task and protocol are resolved first (layers 0, 5, 6); the task source is built once from
the resolved task, and layer 1 reads it; the method is then resolved through every layer.
Each field's deciding layer is kept (:attr:`Resolution.set_by`): ``show`` prints it and a
run records it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from benchmarks.catalog.specs import BenchmarkSpec
from benchmarks.planning.config import field_names, route, validate
from mesabench_core import ConfigError, Settings
from mesabench_datasets.tasks import TaskSource
from methods.api import SHARED_SETTINGS
from methods.registry import MethodEntry

#: How a layer's keys are read: ``shared`` takes only the shared settings the method
#: declares; ``strict`` refuses a field the method lacks; ``routed`` keys are bare or
#: qualified names over every section.
LayerKind = Literal["shared", "strict", "routed"]
SECTIONS = ("method", "task", "protocol")


@dataclass(frozen=True)
class Layer:
    """One source of settings: its name (as errors and ``show`` say it), how its keys are
    read, and its values (a callable of the built task source for the task source's own)."""

    name: str
    kind: LayerKind
    values: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]]
    #: Prefix of this layer's errors: a preset's mistake is named as the preset's.
    blame: str = ""


@dataclass(frozen=True)
class Resolution:
    """The resolved, validated sections, which layer set each field, and the task source
    built from the resolved task (built once, here)."""

    sections: dict[str, Any]
    set_by: dict[str, str]
    source: TaskSource


#: The layer of an evaluation's settings carried from the run whose learner it scores: not
#: the user's choice (:func:`chosen`), though it overrides every default.
CARRIED = "the evaluated run's own settings"


def layers_of(name: str, entry: MethodEntry, spec: BenchmarkSpec, preset: str | None,
              settings: Settings, carried: Settings | None = None) -> list[Layer]:  # fmt: skip
    """The ordered layers of a run of method ``name`` on ``spec`` (layer 0 is the base);
    ``carried``: an evaluation's settings from the trained run, under the user's."""
    layers = [
        Layer(f"the task source of {spec.name}", "shared", lambda source: source.method_defaults()),
        Layer(f"benchmark {spec.name}", "shared", dict(spec.method_defaults)),
        Layer(f"method {name}'s registered variant", "strict", entry.defaults),
        Layer(f"benchmark {spec.name}'s settings for {name}", "strict",
              spec.method_settings.get(name, {})),  # fmt: skip
    ]
    if preset:
        layers.append(Layer(f"preset {preset!r} of {spec.name}", "routed", spec.presets[preset],
                            blame=f"preset {preset!r} of {spec.name}: "))  # fmt: skip
    if carried:
        layers.append(Layer(CARRIED, "routed", dict(carried)))
    layers.append(Layer("--set", "routed", dict(settings)))
    return layers


def _blamed(layer: Layer, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ConfigError as err:
        if not layer.blame:
            raise
        raise ConfigError(f"{layer.blame}{err}") from None


def _shared(entry: MethodEntry, values: Mapping[str, Any], layer: str) -> dict[str, Any]:
    """The part of a benchmark-wide default that this method takes: names of the shared
    vocabulary that the method declares (``shared_settings``) and has as fields. A name
    outside the vocabulary is an error in the layer that set it."""
    unknown = sorted(set(values) - set(SHARED_SETTINGS))
    if unknown:
        raise ConfigError(
            f"{layer} sets {unknown} for every method, but only the shared settings "
            f"{sorted(SHARED_SETTINGS)} may be; set others per method (method_settings)"
        )
    fields = set(field_names(entry.cls.Config()))
    return {k: v for k, v in values.items() if k in entry.cls.shared_settings and k in fields}


def _strict(config: Any, values: Mapping[str, Any], layer: str) -> dict[str, Any]:
    """``values`` as changes of ``config``; a key it lacks is an error naming ``layer`` and
    the closest field names."""
    import difflib

    names = field_names(config)
    for key in values:
        if key not in names:
            near = difflib.get_close_matches(key, names, n=3)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise ConfigError(f"{layer} sets unknown setting {key!r}{hint}")
    return dict(values)


def resolve(name: str, entry: MethodEntry, spec: BenchmarkSpec, layers: list[Layer],
            spec_source: TaskSource | None = None) -> Resolution:  # fmt: skip
    """Resolve and validate the sections of a run over ``layers`` (see :func:`layers_of`).
    ``spec_source``: the spec's own task, already built; used when no layer changes the task
    (each task configuration is built once)."""
    base = {"method": entry.cls.Config(), "task": spec.task, "protocol": spec.protocol}
    set_by = {f"method.{f}": f"method class {type(base['method']).__name__}"
              for f in field_names(base["method"])}  # fmt: skip
    for section in ("task", "protocol"):
        set_by.update({f"{section}.{f}": f"benchmark {spec.name}"
                       for f in field_names(base[section])})  # fmt: skip
    # Every routed key is placed first: a typo is refused before anything else is looked at.
    routed = {id(layer): _blamed(layer, lambda layer=layer: route(base, layer.values))
              for layer in layers if layer.kind == "routed"}  # fmt: skip

    def apply(section: str, config: Any, changes: Mapping[str, Any], layer: str) -> Any:
        set_by.update({f"{section}.{k}": layer for k in changes})
        return dataclasses.replace(config, **changes) if changes else config

    # Task and protocol: the base, then the preset's and the user's changes.
    states = []  # the sections after each routed layer, validated there
    sections = dict(base)
    for layer in layers:
        if layer.kind == "routed":
            for section in ("task", "protocol"):
                sections[section] = apply(section, sections[section],
                                          routed[id(layer)][section], layer.name)  # fmt: skip
            states.append(dict(sections))
    unchanged = spec_source is not None and sections["task"] == spec.task
    source = spec_source if unchanged else sections["task"].build()

    # The method: every layer in order, on the resolved task.
    method = base["method"]
    after = iter(states)
    first_routed = next(layer for layer in layers if layer.kind == "routed")
    for layer in layers:
        if layer.kind == "shared":
            values = layer.values(source) if callable(layer.values) else layer.values
            method = apply("method", method, _shared(entry, values, layer.name), layer.name)
        elif layer.kind == "strict":
            method = apply("method", method, _strict(method, layer.values, layer.name),
                           layer.name)  # fmt: skip
        else:
            if layer is first_routed:
                validate(method, prefix="method.")  # the defaults, before anyone's changes
            method = apply("method", method, routed[id(layer)]["method"], layer.name)
            state = {**next(after), "method": method}
            for section in SECTIONS:
                _blamed(layer, lambda c=state[section], s=section: validate(c, prefix=f"{s}."))
    return Resolution({"method": method, "task": sections["task"],
                       "protocol": sections["protocol"]}, set_by, source)  # fmt: skip


def chosen(set_by: Mapping[str, str]) -> set[str]:
    """The ``section.field`` keys a preset or the user set (``--set``, a sweep's or a tune's
    settings), as against those left at a class's, a variant's or a benchmark's default."""
    return {key for key, layer in set_by.items()
            if layer == "--set" or layer.startswith("preset ")}  # fmt: skip
