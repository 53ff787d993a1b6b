"""What a sweep is: methods x grid x seeds as cells, from the command line or a sweep file
(validated, every mistake named with where it came from), and each cell planned (its
config hash) before anything runs."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from benchmarks.planning.config import BadInput, ConfigError, parse_pairs
from mesabench_datasets.data_root import explicit_root

log = logging.getLogger("mesabench")

#: At most this many seeds in one sweep, each below 2**63 (a generator's seed).
MAX_SEEDS, MAX_SEED = 100_000, 2**63 - 1


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-4"``, ``"0,2,5"`` or a mix (``"0-2,7"``) as a tuple of seeds."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                if high - low >= MAX_SEEDS:  # before a range of 10**12 is made into a list
                    raise ConfigError(f"seeds {part} name more than {MAX_SEEDS:,} seeds")
                seeds += range(low, high + 1)
            elif part:
                seeds.append(int(part))
    except ConfigError:
        raise
    except ValueError:
        raise ConfigError(f"seeds must look like 0-4 or 0,2,5 (got {text!r})") from None
    if not seeds or min(seeds) < 0:
        raise ConfigError(f"seeds must name at least one seed >= 0 (got {text!r})")
    if max(seeds) > MAX_SEED:
        raise ConfigError(f"seeds must be at most {MAX_SEED} (got {max(seeds)})")
    return tuple(dict.fromkeys(seeds))


@dataclass(frozen=True)
class Cell:
    """One run of the sweep."""

    method: str
    seed: int
    overrides: tuple[tuple[str, str], ...]

    def label(self) -> str:
        settings = " ".join(f"{k}={v}" for k, v in self.overrides)
        return f"{self.method} seed {self.seed}" + (f" ({settings})" if settings else "")


@dataclass(frozen=True)
class SweepSpec:
    benchmark: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    grid: tuple[tuple[str, tuple[str, ...]], ...] = ()
    settings: tuple[tuple[str, str], ...] = ()  # fixed --set for every cell
    #: Settings of one method only: (method, ((key, value), ...)), after ``settings``.
    method_settings: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    preset: str | None = None
    device: str = "cpu"
    #: Resources a cell asks Ray for.
    cpus_per_cell: float = 1.0
    gpus_per_cell: float = 0.0
    #: Folder of the real datasets given explicitly, handed to every cell as its only
    #: folder (and recorded by each); not part of the sweep's identity. None: each cell
    #: searches MESABENCH_DATA, then the per-user cache.
    data_root: str | None = None
    #: Where the spec came from, for error messages: "sweep file PATH" or the command line.
    origin: str = "sweep command line"
    #: Every cell's ``RunPlan.tuning`` (a ``tune`` trial or selected configuration), or None.
    tuning: str | None = None

    def cells(self) -> list[Cell]:
        keys = [k for k, _ in self.grid]
        combos = itertools.product(*(values for _, values in self.grid)) if keys else [()]
        cells = []
        own = dict(self.method_settings)
        for method, combo in itertools.product(self.methods, list(combos)):
            overrides = (*self.settings, *own.get(method, ()), *zip(keys, combo, strict=True))
            cells += [Cell(method, seed, tuple(overrides)) for seed in self.seeds]
        return cells

    def sweep_id(self) -> str:
        """Names the sweep: the same spec gives the same id, so a re-run finds its parent."""
        body = json.dumps(
            {
                "benchmark": self.benchmark,
                "methods": self.methods,
                "seeds": self.seeds,
                "grid": self.grid,
                "settings": self.settings,
                "preset": self.preset,
                # Only where given, so that every earlier sweep keeps its id.
                **({"method_settings": self.method_settings} if self.method_settings else {}),
                **({"tuning": self.tuning} if self.tuning else {}),
            },
            sort_keys=True,
        )
        return hashlib.sha256(body.encode()).hexdigest()[:12]


def spec_from_args(
    benchmark: str,
    methods: str,
    seeds: str,
    grid: Sequence[str] = (),
    settings: Sequence[str] = (),
    preset: str | None = None,
    device: str = "cpu",
    data_root: str | None = None,
) -> SweepSpec:
    grid_items = []
    for item in grid:
        key, values = next(iter(parse_pairs([item], "--grid").items()))
        if key in dict(grid_items):
            raise ConfigError(f"--grid {key} is given twice; give its values once: "
                              f"--grid {key}=V1,V2,...")  # fmt: skip
        options = tuple(v.strip() for v in values.split(",") if v.strip())
        if not options:
            raise ConfigError(f"--grid {key} needs at least one value")
        grid_items.append((key, options))
    names = tuple(m.strip() for m in methods.split(",") if m.strip())
    if not names:
        raise ConfigError("--methods needs at least one method name")
    # --set METHOD:KEY=VALUE sets KEY for that method's cells only.
    common, own = {}, {}
    for key, value in parse_pairs(settings, "--set").items():
        method, colon, name = key.partition(":")
        if not colon:
            common[key] = value
        elif method not in names:
            raise ConfigError(f"--set {key}: {method!r} is none of the sweep's methods "
                              f"({', '.join(names)})")  # fmt: skip
        else:
            own.setdefault(method, {})[name] = value
    return SweepSpec(
        benchmark=benchmark,
        methods=names,
        seeds=parse_seeds(seeds),
        grid=tuple(grid_items),
        settings=tuple(common.items()),
        method_settings=tuple((m, tuple(own[m].items())) for m in names if m in own),
        preset=preset,
        device=device,
        data_root=explicit_root(data_root),
    )


class _NoDuplicates(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys without a word; a sweep file may not."""


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_NoDuplicates.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)

Scalar = StrictStr | StrictBool | StrictInt | StrictFloat


class SweepFile(BaseModel):
    """The sweep file format, every key (docs/running.md, "Sweep files")."""

    model_config = ConfigDict(extra="forbid", strict=True)

    #: The benchmark every cell runs on.
    benchmark: StrictStr
    #: One method or a list of them.
    methods: StrictStr | list[StrictStr]
    #: ``0-4``, ``0,2,5``, one seed, or a list of seeds.
    seeds: StrictStr | NonNegativeInt | list[NonNegativeInt]
    #: Setting -> the list of its values; every combination is a cell.
    grid: dict[StrictStr, list[Scalar]] = Field(default_factory=dict)
    #: Setting -> value for every cell; a method's name -> its own settings.
    set: dict[StrictStr, Scalar | dict[StrictStr, Scalar]] = Field(default_factory=dict)
    preset: StrictStr | None = None
    device: StrictStr = "cpu"
    #: What each cell asks a Ray cluster for.
    cpus_per_cell: PositiveFloat = 1.0
    gpus_per_cell: NonNegativeFloat = 0.0
    #: Folder of the real datasets (a --data-root given on the command line wins).
    data_root: StrictStr | None = None


#: What each key of a sweep file takes, in words (for the one-line refusals).
SWEEP_KEYS = {
    "benchmark": "a benchmark's name", "methods": "a method's name or a list of names",
    "seeds": "0-4, 0,2,5, one seed or a list of seeds",
    "grid": "setting: [value, ...] (every combination is a cell)",
    "set": "setting: value for every cell, or method: {setting: value} for one method",
    "preset": "a preset's name", "device": "cpu, cuda or cuda:N",
    "cpus_per_cell": "a number > 0", "gpus_per_cell": "a number >= 0",
    "data_root": "a folder with the real datasets",
}  # fmt: skip
_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list"}


def _first_problem(err: ValidationError) -> str:
    """Pydantic's complaint as one line: where, what is wrong, what was given, and what
    the key takes."""
    problems = err.errors()
    unknown = sorted(str(p["loc"][0]) for p in problems if p["type"] == "extra_forbidden")
    if unknown:
        return f"unknown keys {unknown}; allowed: {sorted(SweepFile.model_fields)}"
    problem = problems[0]
    # A union's alternatives each add their type to the location: not the user's words.
    def tag(part) -> bool:
        return isinstance(part, str) and (part.split("[")[0] in _TYPE_TAGS or "-" in part)

    parts = [p for p in problem["loc"] if not tag(p)]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)[1:]
    key = str(parts[0])
    if problem["type"] == "missing":
        return f"{where} is required (a sweep file needs benchmark, methods and seeds)"
    return (f"{where}: {problem['msg'].lower()} (got {problem.get('input')!r}); {key} takes "
            f"{SWEEP_KEYS.get(key, 'another value')}")  # fmt: skip


def _text(value: object) -> str:
    """A setting's value as text, as sweeps have always recorded it (``True`` for YAML's
    true: the parser reads both, and a sweep's id must not change)."""
    return str(value)


def spec_from_file(path: Path, data_root: str | None = None) -> SweepSpec:
    """A YAML sweep file, checked against :class:`SweepFile` (types, ranges, unknown and
    duplicate keys); ``data_root`` given here wins over the file's."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read sweep file {path}: {err.strerror}") from None
    try:
        body = yaml.load(raw.decode("utf-8"), Loader=_NoDuplicates)  # noqa: S506 (a safe loader)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML: {' '.join(str(err).split())[:200]}") from None
    if not isinstance(body, dict):
        raise ConfigError(f"{path}: a sweep file is a mapping of keys (benchmark, methods, "
                          "seeds, ...)")  # fmt: skip
    try:
        sweep = SweepFile.model_validate(body)
    except ValidationError as err:
        raise ConfigError(f"{path}: {_first_problem(err)}") from None
    methods = (sweep.methods,) if isinstance(sweep.methods, str) else tuple(sweep.methods)
    if not methods:
        raise ConfigError(f"{path}: methods must name at least one method")
    for key, values in sweep.grid.items():
        if not values:
            raise ConfigError(f"{path}: grid.{key} needs at least one value")
    seeds = sweep.seeds
    text = ",".join(map(str, seeds)) if isinstance(seeds, list) else str(seeds)
    common = {k: v for k, v in sweep.set.items() if not isinstance(v, dict)}
    own = {k: v for k, v in sweep.set.items() if isinstance(v, dict)}
    strangers = sorted(set(own) - set(methods))
    if strangers:
        raise ConfigError(f"{path}: set.{strangers[0]} holds settings, but "
                          f"{strangers[0]!r} is none of the sweep's methods "
                          f"({', '.join(methods)})")  # fmt: skip
    return SweepSpec(
        origin=f"sweep file {path}",
        benchmark=sweep.benchmark,
        methods=methods,
        seeds=parse_seeds(text),
        grid=tuple((k, tuple(_text(v) for v in vs)) for k, vs in sweep.grid.items()),
        settings=tuple((k, _text(v)) for k, v in common.items()),
        method_settings=tuple((m, tuple((k, _text(v)) for k, v in own[m].items()))
                              for m in methods if m in own),  # fmt: skip
        preset=sweep.preset,
        device=sweep.device,
        cpus_per_cell=sweep.cpus_per_cell,
        gpus_per_cell=sweep.gpus_per_cell,
        data_root=explicit_root(data_root or sweep.data_root),
    )


def plan_cells(spec: SweepSpec) -> dict[Cell, str]:
    """Validate every cell before anything runs; returns each cell's config hash.

    A configuration is planned once for all its seeds (the hash leaves the seed out, and
    the seeds were checked when parsed): a 10,000-cell sweep plans its grid points only."""
    from benchmarks.planning.plan import plan_run

    hashes, by_setting = {}, {}
    for cell in spec.cells():
        setting = (cell.method, cell.overrides)
        if setting not in by_setting:
            try:
                plan = plan_run(
                    cell.method, spec.benchmark, cell.seed, dict(cell.overrides), spec.device,
                    spec.preset, data_root=spec.data_root, tuning=spec.tuning,
                )  # fmt: skip
            except BadInput as err:
                layer = _layer_of(spec, cell.method, str(err))
                hint = ""
                if len(spec.methods) > 1:  # which of them lacks the setting
                    layer = f"{layer}, for method {cell.method}"
                    hint = _owners_hint(spec, str(err)) if layer.startswith("set,") else ""
                raise ConfigError(f"{spec.origin}, {layer}: {err}{hint}") from None
            by_setting[setting] = plan.config_hash()
        hashes[cell] = by_setting[setting]
    return hashes


def _owners_hint(spec: SweepSpec, message: str) -> str:
    """Where a setting given to every method is some of them's own: how to give it to
    those alone (a setting of one method is set per method, not for the whole sweep)."""
    from benchmarks.catalog.installed import method_entry

    refused = re.search(r"unknown setting '([^']+)'", message)
    if refused is None:
        return ""
    key = refused.group(1)
    owners = [m for m in spec.methods
              if key in {f.name for f in dataclasses.fields(method_entry(m).cls.Config)}]
    if not owners:
        return ""
    value = dict(spec.settings).get(key, "V")
    if spec.origin.startswith("sweep file"):
        how = "; ".join(f"set: {{{m}: {{{key}: {value}}}}}" for m in owners)
    else:
        how = " ".join(f"--set {m}:{key}={value}" for m in owners)
    return f"; {key} is a setting of {', '.join(owners)} only: {how}"


def _layer_of(spec: SweepSpec, method: str, message: str) -> str:
    """Which part of the sweep a refused setting came from (the message quotes the key)."""
    def said(pairs) -> bool:
        return any(f"'{key}'" in message or f" {key} " in message for key, _ in pairs)

    if said(spec.grid):
        return "grid"
    if said(dict(spec.method_settings).get(method, ())):
        return f"set.{method}"
    if said(spec.settings):
        return "set"
    return "methods, benchmark or preset"
