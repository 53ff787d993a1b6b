"""docs/RESULTS.md's tables judged from shipped runs: generated from the runs, not written.

A section of the page between the two lines

    <!-- shipped table: TABLE --preset PRESET --seeds SEEDS -->
    <!-- end shipped table -->

is the table judged from its shipped bundle alone (``shipped_runs/TABLE.mesabundle``,
imported into a scratch store; nothing runs), its header naming the bundle and when and
on what machine its runs were made, so that the same runs always give the same text; a
table that declares a figure ends its section with it, drawn from the same runs into the
page's ``img/`` folder (``TABLE.png``, and ``TABLE.csv``: every number drawn).
``python -m benchmarks results-page`` rewrites every such section of the page and its
figure; ``--check`` only names the sections whose text or figure data differ (exit 1), and
the test suite runs it against the committed page. Prose around the sections is the
page's own.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.planning.config import ConfigError
from benchmarks.published.reproduce import markdown, reproduce

BEGIN = re.compile(r"^<!-- shipped table: (\S+) --preset (\S+) --seeds (\S+) -->$", re.M)
END = "<!-- end shipped table -->"
COMMAND = "python -m benchmarks results-page"


@dataclass(frozen=True)
class Section:
    """One generated section: where its text lies in the page, and what it is of."""

    table: str
    preset: str
    seeds: str
    start: int  # just after the BEGIN line
    end: int  # at the END line

    @property
    def label(self) -> str:
        return f"{self.table} --preset {self.preset} --seeds {self.seeds}"

    def check(self) -> None:
        """The table, the preset and the seeds it names exist (one line, else)."""
        from benchmarks.published.tables import check_preset, table_named
        from benchmarks.sweeps.spec import parse_seeds

        try:
            table_named(self.table)
            check_preset(self.preset)
            parse_seeds(self.seeds)
        except ConfigError as err:
            raise ConfigError(f"results page, section {self.label}: {err}") from None


def sections(page: str) -> Iterator[Section]:
    """The page's generated sections, in order; an unclosed or nested one is refused."""
    at = 0
    while (begin := BEGIN.search(page, at)) is not None:
        start = begin.end() + 1
        end = page.find(END, start)
        following = BEGIN.search(page, start)
        if end < 0 or (following is not None and following.start() < end):
            raise ConfigError(f"results page: the section of {begin.group(1)} has no "
                              f"{END!r} line before the next section")  # fmt: skip
        yield Section(*begin.groups(), start, end)
        at = end + len(END)


def _day(milliseconds: int) -> str:
    return datetime.datetime.fromtimestamp(milliseconds / 1000, datetime.UTC).date().isoformat()


class ScratchStores:
    """New, empty SQLite stores in ``folder``, each a copy of one made once (MLflow's
    migrations cost 1.5-3 s a store): one per section, so that each table is judged from
    its own bundle alone, never from another table's shipped runs of the same
    configuration."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._template: Path | None = None
        self._made = 0

    def new(self):
        import shutil
        import sqlite3

        from benchmarks.store.client import open_store
        from benchmarks.store.tracking import MlflowTracker

        if self._template is None:
            self._template = self.folder / "template" / "mlflow.db"
            open_store(f"sqlite:///{self._template}")
            with sqlite3.connect(self._template) as connection:  # the store in one file
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._made += 1
        db = self.folder / f"section-{self._made}" / "mlflow.db"
        db.parent.mkdir(parents=True)
        shutil.copyfile(self._template, db)
        return MlflowTracker(f"sqlite:///{db}")


#: Where a page's figures are, beside it (what its sections' links name).
FIGURES = "img"


def section_text(section: Section, tracker, figures: Path | None = None) -> str:
    """The section's table judged from its shipped runs (imported into ``tracker``'s store,
    a new one: the table's own runs alone); its figure, if it declares one, drawn into
    ``figures`` (the section then links it as ``img/TABLE.png``)."""
    from benchmarks.published.reproduce import write_figure
    from benchmarks.published.tables import table_named
    from benchmarks.store.bundles import (
        SOURCE_RUN_TAG,
        check_installed,
        import_bundle,
        read_bundle,
    )
    from benchmarks.store.shipped import table_bundle

    table = table_named(section.table)
    path = table_bundle(table.name)
    if not path.exists():
        raise ConfigError(f"results page: {section.table} ships no runs ({path})")
    bundle = read_bundle(path)
    check_installed(bundle)
    import_bundle(tracker, bundle)
    outcome = reproduce(table, tracker, section.preset, section.seeds, run=False)
    judged = {run_id for by_seed in outcome.runs.values() for run_id, _ in by_seed.values()}
    sources = {tracker.client.get_run(i).data.tags.get(SOURCE_RUN_TAG) for i in judged}
    made = [r for r in bundle.runs if r["source_run"] in sources]
    if not made:
        raise ConfigError(f"results page: {path.name} holds no runs of {section.label}")
    days = sorted({_day(r["start_time"]) for r in made})
    machines = "; ".join(sorted({r["tags"].get("mesabench.machine", "?") for r in made}))
    when = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"
    size = path.stat().st_size / 1024
    provenance = (f"Judged from its {len(made)} shipped runs (`shipped_runs/{path.name}`, "
                  f"{size:.0f} KiB; run {when} on {machines}) by `{COMMAND}`; "
                  f"`python -m benchmarks reproduce {table.name} --preset {section.preset}` "
                  "judges the same runs and runs only the cells they lack.")  # fmt: skip
    link = None
    if figures is not None and write_figure(outcome, tracker.client, figures) is not None:
        link = f"{FIGURES}/{table.name}.png"
    return markdown(outcome, tracker.uri, figure=link, provenance=provenance)


def regenerate(page: str, stores: ScratchStores, figures: Path | None = None,
               committed: Path | None = None) -> tuple[str, list[str]]:  # fmt: skip
    """The page with every generated section rewritten (each judged in a new store of
    ``stores``; its figure drawn into ``figures``, if given), and the labels of those that
    changed: their text, or their figure's data against ``committed``'s (the page's
    ``img/`` folder: a figure missing there, or its CSV not the drawn one's bytes)."""
    found = list(sections(page))
    for section in found:  # every section's names checked before anything is imported
        section.check()
    out, changed, at = [], [], 0
    for section in found:
        text = section_text(section, stores.new(), figures)
        out += [page[at:section.start], text]
        if page[section.start:section.end] != text:
            changed.append(section.label)
        elif (figures is not None and committed is not None
              and figure_differs(section.table, figures, committed)):  # fmt: skip
            changed.append(f"{section.label} (its figure)")
        at = section.end
    out.append(page[at:])
    return "".join(out), changed


def figure_differs(table: str, figures: Path, committed: Path) -> bool:
    """Whether ``table``'s figure drawn into ``figures`` differs from ``committed``'s: its
    data (the CSV, every number drawn), or its PNG missing there. False where none was
    drawn (the table declares none, or it has no point)."""
    drawn, held = figures / f"{table}.csv", committed / f"{table}.csv"
    return drawn.exists() and (not held.exists() or held.read_bytes() != drawn.read_bytes()
                               or not held.with_suffix(".png").exists())  # fmt: skip


def changed_figures(figures: Path, committed: Path) -> list[str]:
    """The tables whose figure drawn into ``figures`` differs from ``committed``'s: those a
    rewrite copies over; an unchanged figure's PNG is left as it is (matplotlib's bytes
    vary by version)."""
    return [d.stem for d in sorted(figures.glob("*.csv"))
            if figure_differs(d.stem, figures, committed)]  # fmt: skip
