"""``results-page``: docs/RESULTS.md's shipped-run tables rewritten from the shipped runs
(:mod:`benchmarks.published.results_page`), or with ``--check`` compared with them."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rich.console import Console

from benchmarks.planning.config import ConfigError


def add_commands(sub) -> None:
    page = sub.add_parser(
        "results-page",
        help="rewrite the results page's tables judged from shipped runs (--check: compare)",
    )
    page.add_argument("page", nargs="?", default="docs/RESULTS.md",
                      help="the page (default docs/RESULTS.md)")  # fmt: skip
    page.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 naming each section that differs")  # fmt: skip


def cmd_results_page(args: argparse.Namespace, console: Console) -> int:
    import shutil

    from benchmarks.published.results_page import (
        FIGURES,
        ScratchStores,
        changed_figures,
        regenerate,
        sections,
    )

    path = Path(args.page)
    try:
        page = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"results-page: cannot read {path}: {err.strerror or err}") from None
    found = list(sections(page))
    if not found:
        raise ConfigError(f"results-page: {path} has no '<!-- shipped table: ... -->' section")
    committed = path.parent / FIGURES
    # Scratch stores: the shipped runs alone, whatever the user's own store holds; the
    # figures drawn beside them, compared with (or copied over) the page's own.
    with tempfile.TemporaryDirectory() as scratch:
        drawn = Path(scratch) / FIGURES
        drawn.mkdir()
        text, changed = regenerate(page, ScratchStores(Path(scratch)), drawn, committed)
        if args.check:
            for label in changed:
                console.print(f"differs from its shipped runs: {label}", soft_wrap=True)
            console.print(f"{path}: {len(found)} section(s), {len(changed)} differ",
                          soft_wrap=True)  # fmt: skip
            return 1 if changed else 0
        redrawn = changed_figures(drawn, committed)
        if redrawn:
            committed.mkdir(exist_ok=True)
        for table in redrawn:
            for suffix in (".png", ".csv"):
                shutil.copyfile(drawn / f"{table}{suffix}", committed / f"{table}{suffix}")
    if text != page:  # whole or not at all: a page half-written would lose prose
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    console.print(f"{path}: {len(found)} section(s), {len(changed)} rewritten "
                  f"({len(redrawn)} figure(s) redrawn)", soft_wrap=True)  # fmt: skip
    return 0
