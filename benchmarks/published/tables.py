"""The catalog of published tables, each reproducible in one command with a verdict per line.

What a table and a line are, and how a line is judged: :mod:`benchmarks.published.claims`.
The tables, by paper: :mod:`benchmarks.published.in_context` (von Oswald et al. 2023 and
thesis ch. 2), :mod:`benchmarks.published.icl_blog` (the ICLR 2024 blog post),
:mod:`benchmarks.published.gdssm` (Sushma et al., GD-SSM), :mod:`benchmarks.published.mesa`
(thesis ch. 3), :mod:`benchmarks.published.meta_learning` (thesis ch. 4),
:mod:`benchmarks.published.maml` (the MAML paper).
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.planning.config import ConfigError
from benchmarks.published import gdssm, icl_blog, in_context, maml, mesa, meta_learning
from benchmarks.published.claims import (  # noqa: F401  (the tables' vocabulary, re-exported)
    PRESETS,
    Claim,
    Judged,
    Table,
    band_limits,
    judge,
    judge_table,
)

TABLES: dict[str, Table] = {
    table.name: table
    for table in (*in_context.TABLES, *icl_blog.TABLES, *gdssm.TABLES, *mesa.TABLES,
                  *meta_learning.TABLES, *maml.TABLES)
}


def table_named(name: str) -> Table:
    if name not in TABLES:
        raise ConfigError(f"unknown table {name!r}; allowed: {', '.join(TABLES)}")
    return TABLES[name]


def check_preset(preset: str) -> str:
    if preset not in PRESETS:
        raise ConfigError(f"--preset must be one of {', '.join(PRESETS)} (got {preset!r})")
    return preset


def check_catalog(tables: Sequence[Table] = tuple(TABLES.values())) -> None:
    """Every relation names a line of its own table, and so does every figure; labels are
    unique; every target says where it comes from."""
    for table in tables:
        labels = [c.label for c in table.claims]
        if len(set(labels)) != len(labels):
            raise ValueError(f"{table.name}: duplicate line labels")
        for claim in table.claims:
            if claim.versus is not None and claim.versus not in labels:
                raise ValueError(f"{table.name}: {claim.label!r} compares with unknown line")
            if (claim.target is not None or claim.versus is not None) and not claim.cite:
                raise ValueError(f"{table.name}: {claim.label!r} does not cite its source")
            if claim.target_presets and (claim.target is None
                                         or not set(claim.target_presets) <= set(PRESETS)):
                raise ValueError(f"{table.name}: {claim.label!r} names presets for its target "
                                 f"({claim.target_presets}) without a target or outside "
                                 f"{', '.join(PRESETS)}")  # fmt: skip
        if table.figure is not None:
            unknown = table.figure.lines() - set(labels)
            if unknown:
                raise ValueError(f"{table.name}: its figure reads unknown lines {unknown}")
