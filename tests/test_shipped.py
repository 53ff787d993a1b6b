"""Shipped runs (shipped_runs/TABLE.mesabundle): a table assembled from shipped and local runs, run
only where cells are missing, shipped back; a new method ranked beside shipped baselines
without re-running them. A real SQLite store, the command line in-process."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from benchmarks.published.reproduce import catalog_rows, shipped_seconds
from benchmarks.published.tables import TABLES
from benchmarks.store.bundles import IMPORTED_FROM_TAG, read_bundle
from benchmarks.store.shipped import FOLDER_ENV
from tests.helpers import TINY, leaderboard_json, stored_runs
from tests.test_reproduce import TINY_TABLE

TABLE = TINY_TABLE.name
RESULTS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "RESULTS.md"


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """An empty shipped-runs folder, and the tiny table registered under TABLE."""
    folder = tmp_path / "runs"
    folder.mkdir()
    monkeypatch.setenv(FOLDER_ENV, str(folder))
    monkeypatch.setitem(TABLES, TABLE, TINY_TABLE)
    return folder


def _by_seed(store: str) -> dict[tuple[str, str], str]:
    """(method, seed) -> 'local' or 'imported', for the store's runs of the table."""
    return {(r.data.tags["mesabench.method"], r.data.tags["mesabench.seed"]):
            "imported" if IMPORTED_FROM_TAG in r.data.tags else "local"
            for r in stored_runs(store) if "mesabench.method" in r.data.tags}  # fmt: skip


def test_a_table_is_assembled_from_shipped_runs_and_runs_only_missing_cells(
    shipped, new_store, capsys, monkeypatch
):
    first, second = new_store("first"), new_store("second")
    base = ["reproduce", TABLE, "--warm", "--workers", "2"]
    # Nothing finished (here: nothing run): no bundle is written, not an empty one.
    assert main([*base, "--no-run", "--ship", "--tracking-uri", first]) == 0
    assert "has no finished run to ship" in capsys.readouterr().out
    assert not (shipped / f"{TABLE}.mesabundle").exists()
    # A first sitting runs seeds 0-1 and ships them.
    assert main([*base, "--seeds", "0-1", "--ship", "--tracking-uri", first]) == 0
    bundle = shipped / f"{TABLE}.mesabundle"
    assert "4 run(s), 4 new" in capsys.readouterr().out
    data = bundle.read_bytes()
    # Shipping again adds nothing and writes the same bytes.
    assert main([*base, "--seeds", "0-1", "--ship", "--tracking-uri", first]) == 0
    assert bundle.read_bytes() == data
    assert "4 run(s), 0 new;" in " ".join(capsys.readouterr().out.split())
    # Judged in a store that holds only the shipped runs: the same lines, numbers and
    # verdicts as in the store they were made in.
    judged = []
    for store in (first, new_store("copy")):
        assert main(["reproduce", TABLE, "--seeds", "0-1", "--no-run", "--markdown",
                     "--tracking-uri", store]) == 0  # fmt: skip
        judged.append([line for line in capsys.readouterr().out.splitlines()
                       if line.startswith("| ")])  # fmt: skip
    assert len(judged[0]) > 2 and judged[0] == judged[1]
    # A second sitting, elsewhere: the shipped cells are imported, only seed 2 runs.
    capsys.readouterr()
    assert main([*base, "--seeds", "0-2", "--ship", "--tracking-uri", second]) == 0
    out = capsys.readouterr().out
    assert f"shipped runs ({TABLE}.mesabundle): 4 added, 0 already in the store" in out
    # Each line's sweep found the imported cells finished and ran seed 2 alone.
    assert out.count("1 to run, 2 already finished") == 2, out
    assert _by_seed(second) == {
        ("maml", "0"): "imported", ("maml", "1"): "imported", ("maml", "2"): "local",
        ("fomaml", "0"): "imported", ("fomaml", "1"): "imported", ("fomaml", "2"): "local",
    }  # fmt: skip
    # The bundle now holds all six, the four it had exactly as before (same source runs).
    runs = read_bundle(bundle).runs
    assert len(runs) == 6
    data_all = bundle.read_bytes()
    first_ids = {r.info.run_id for r in stored_runs(first)}
    assert sum(r["source_run"] in first_ids for r in runs) == 4
    # reproduce --list's cost is the shipped runs' own: each line's mean wall over its seeds.
    spent: dict[str, list[float]] = {}
    for r in runs:
        spent.setdefault(r["tags"]["mesabench.method"], []).append(
            (r["end_time"] - r["start_time"]) / 1000)  # fmt: skip
    measured = {key[1]: s for key, s in shipped_seconds(TINY_TABLE, "quick").items()}
    assert measured == pytest.approx({m: sum(t) / len(t) for m, t in spent.items()}, rel=1e-12)
    (row,) = catalog_rows([TINY_TABLE])
    assert row[4].startswith("4 runs, ~") and row[4].endswith(", shipped runs' times"), row
    # A line whose settings change: its old runs leave the bundle when the table ships
    # again (they are behind no number of it), the other line's stay.
    changed = dataclasses.replace(TINY_TABLE, claims=(
        TINY_TABLE.claims[0], dataclasses.replace(TINY_TABLE.claims[1], settings={
            **TINY_TABLE.claims[1].settings, "inner_lr": "0.02"}),
        *TINY_TABLE.claims[2:]))  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(TABLES, TABLE, changed)
        capsys.readouterr()
        assert main([*base, "--seeds", "0", "--ship", "--tracking-uri", second]) == 0
        said = capsys.readouterr().out
        assert "3 dropped (of configurations no line runs now)" in said, said
        methods = sorted(r["tags"]["mesabench.method"] for r in read_bundle(bundle).runs)
        assert methods == sorted([TINY_TABLE.claims[0].method] * 3
                                 + [TINY_TABLE.claims[1].method])  # fmt: skip
        bundle.write_bytes(data_all)  # the unchanged table's bundle again, for below
    # Judged from shipped and local runs alike: the paired line has three seeds.
    assert main(["reproduce", TABLE, "--seeds", "0-2", "--no-run", "--markdown",
                 "--tracking-uri", second]) == 0  # fmt: skip
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("| fomaml = maml (paired) |"))  # fmt: skip
    assert "(n=3)" in row, row
    # Another table's bundle holding the same cells (a copy of this one's).
    other = dataclasses.replace(TINY_TABLE, name="tiny-other", claims=TINY_TABLE.claims[:1])
    monkeypatch.setitem(TABLES, other.name, other)
    (shipped / f"{other.name}.mesabundle").write_bytes(data_all)
    # A cell run again apart from the bundle (--no-shipped) and shipped: the bundle keeps
    # the run the table judged, one run per cell, not both; and the other table's bundle
    # gets the same run of each cell it holds, so that no cell has two runs.
    third = new_store("third")
    assert main([*base, "--seeds", "0", "--no-shipped", "--ship", "--tracking-uri", third]) == 0
    said = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "6 run(s), 2 new, 2 replaced (cells run again); the same run put in tiny-other " \
           "(2)" in said, said
    runs = read_bundle(bundle).runs
    cells = [(r["tags"]["mesabench.method"], r["tags"]["mesabench.seed"]) for r in runs]
    assert len(cells) == len(set(cells)) == 6
    third_ids = {r.info.run_id for r in stored_runs(third)}
    assert {c for r, c in zip(runs, cells, strict=True) if r["source_run"] in third_ids} == {
        ("maml", "0"), ("fomaml", "0")}  # fmt: skip
    held = {(r["tags"]["mesabench.method"], r["tags"]["mesabench.seed"]): r["source_run"]
            for r in read_bundle(shipped / f"{other.name}.mesabundle").runs}  # fmt: skip
    assert held == dict(zip(cells, (r["source_run"] for r in runs), strict=True))
    # A ship cut short after its own bundle (the other one as it was): shipping again, with
    # nothing new, mends it.
    mended = (shipped / f"{other.name}.mesabundle").read_bytes()
    (shipped / f"{other.name}.mesabundle").write_bytes(data_all)
    assert main([*base, "--seeds", "0", "--no-shipped", "--no-run", "--ship",
                 "--tracking-uri", third]) == 0  # fmt: skip
    said = " ".join(capsys.readouterr().out.split())
    assert "6 run(s), 0 new; the same run put in tiny-other (2)" in said, said
    assert (shipped / f"{other.name}.mesabundle").read_bytes() == mended


def test_a_new_method_ranks_beside_the_shipped_baselines_paired_by_seed(
    shipped, new_store, capsys
):
    lab = new_store("lab")
    for seed in ("0", "1"):
        for method in ("maml", "fomaml"):
            assert main(["run", "--method", method, "--seed", seed, *TINY,
                         "--tracking-uri", lab]) == 0  # fmt: skip
    assert main(["export", str(shipped / "baselines.mesabundle"), "--tracking-uri", lab]) == 0
    mine = new_store("mine")
    for seed in ("0", "1"):
        assert main(["run", "--method", "metasgd", "--seed", seed, *TINY,
                     "--tracking-uri", mine]) == 0  # fmt: skip
    board = leaderboard_json(mine, capsys, "--benchmark", "sinusoid-5shot", "--shipped",
                             "--baseline", "maml")  # fmt: skip
    rows = {r["method"]: r for r in board["rows"] if r.get("status") != "reference"}
    assert set(rows) == {"maml", "fomaml", "metasgd"}
    assert rows["metasgd"]["n"] == rows["maml"]["n"] == 2
    assert len(rows["maml"]["imported"]) == 2 and rows["metasgd"]["imported"] == []
    # Paired with the shipped maml over both seeds, from the same test tasks.
    maml = {r.data.tags["mesabench.seed"]: r.data.metrics["final/test_loss"]
            for r in stored_runs(mine) if r.data.tags["mesabench.method"] == "maml"}  # fmt: skip
    ours = {r.data.tags["mesabench.seed"]: r.data.metrics["final/test_loss"]
            for r in stored_runs(mine) if r.data.tags["mesabench.method"] == "metasgd"}  # fmt: skip
    expected = sum(ours[s] - maml[s] for s in ("0", "1")) / 2
    versus = rows["metasgd"]["versus_baseline"]
    assert versus["pairs"] == 2 and versus["difference"] == pytest.approx(expected)
    # Nothing was trained for the baselines: their runs are the lab's, imported.
    assert len(MlflowClient(mine).search_runs(
        [MlflowClient(mine).get_experiment_by_name("sinusoid-5shot").experiment_id])) == 6


def test_shipped_with_no_bundles_is_one_line_and_exit_2(shipped, unopened_store, capsys):
    code = main(["leaderboard", "--shipped", "--tracking-uri", unopened_store])
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--shipped: no bundles in" in line
    assert not Path(unopened_store.removeprefix("sqlite:///")).exists()  # nothing written


def test_a_typo_beside_shipped_runs_is_one_line_and_imports_nothing(
    shipped, new_store, unopened_store, capsys
):
    """The shipped runs are imported before the store is read: every setting is checked
    before that, so a bad --since, --metric or --seeds writes nothing at all."""
    lab = new_store("lab")
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", lab]) == 0
    assert main(["export", str(shipped / f"{TABLE}.mesabundle"), "--tracking-uri", lab]) == 0
    capsys.readouterr()
    for argv, said in ((["leaderboard", "--shipped", "--since", "yesterday"], "--since"),
                       (["leaderboard", "--shipped", "--metric", "final/tst_loss"],
                        "cannot rank by final/tst_loss"),
                       (["reproduce", TABLE, "--seeds", "0-x", "--no-run"], "seed")):  # fmt: skip
        assert main([*argv, "--tracking-uri", unopened_store]) == 2, argv
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert said in line, line
        assert not Path(unopened_store.removeprefix("sqlite:///")).exists(), argv


def test_the_readmes_reproduce_example_runs_nothing_and_draws_from_the_shipped_runs(
    tmp_path, store, capsys
):
    """README's `reproduce icml23-one-step --preset cpu --figure figs/`: every cell is
    shipped, so nothing runs, and the figure (ICML'23 Fig. 2: loss and alignment over
    training) is drawn from the histories the bundle carries: each point the mean over the
    three seeds' shipped histories."""
    import csv
    import statistics

    from benchmarks.store.shipped import table_bundle

    readme = (RESULTS_PAGE.parents[1] / "README.md").read_text(encoding="utf-8")
    assert "python -m benchmarks reproduce icml23-one-step --preset cpu --figure figs/" in readme
    figs = tmp_path / "figs"
    assert main(["reproduce", "icml23-one-step", "--preset", "cpu", "--figure", str(figs),
                 "--tracking-uri", store]) == 0  # fmt: skip
    out = capsys.readouterr().out
    counts = re.findall(r"(\d+) to run", out.replace("\n", " "))
    assert counts and set(counts) == {"0"}, out  # every line's sweep found its cells done
    assert (figs / "icml23-one-step.png").stat().st_size > 10_000
    with open(figs / "icml23-one-step.csv", encoding="utf-8") as handle:
        drawn = [row for row in csv.DictReader(handle) if row["series"] == "trained 1-layer LSA"]
    lsa = [r for r in read_bundle(table_bundle("icml23-one-step")).runs
           if r["tags"]["mesabench.method"] == "lsa"
           and r["params"]["task.input_range"] == "0.5"]  # fmt: skip
    assert len(lsa) == 3
    for key, panel in (("val/loss", "Loss over training"),
                       ("monitor/align/sens_cosine", "Alignment with GD over training")):
        by_step: dict[int, list[float]] = {}
        for run in lsa:
            for step, _, value in run["histories"][key]:
                by_step.setdefault(step, []).append(value)
        points = {float(r["x"]): float(r["mean"]) for r in drawn if r["panel"].startswith(panel)}
        assert len(points) == len(by_step) >= 20
        assert points == pytest.approx({float(k): statistics.fmean(v)
                                        for k, v in by_step.items()}, rel=1e-9)


def _one_step_row(page: str) -> tuple[str, str]:
    """A row of icml23-one-step's generated section, and the same row with its mean 2% off."""
    row = next(line for line in page.splitlines()
               if line.startswith("| one GD step, U(-1, 1) | gd |"))  # fmt: skip
    mean = row.split(" | ")[5].split(" ± ")[0]  # ours: mean ± std (n)
    return row, row.replace(f"| {mean} ± ", f"| {float(mean) * 1.02:.4g} ± ")


def _figure_off(data: Path) -> str:
    """A figure's data (its CSV) with its first point's mean 2% off."""
    lines = data.read_text(encoding="utf-8").splitlines(keepends=True)
    value = lines[1].rstrip("\n").split(",")[-3]  # ...,x,mean,std_over_seeds,n_seeds
    off = lines[1].replace(f",{value},", f",{float(value) * 1.02!r},", 1)
    assert off != lines[1]
    return "".join([lines[0], off, *lines[2:]])


def test_a_results_page_section_off_its_shipped_runs_is_named_and_written_back(
    tmp_path, capsys
):
    """A section of docs/RESULTS.md judged from shipped runs, with a number 2% off: --check
    names it (exit 1) and writes nothing; the command writes the committed section back."""
    from benchmarks.published.results_page import BEGIN, END

    committed = RESULTS_PAGE.read_text(encoding="utf-8")
    begin = next(m for m in BEGIN.finditer(committed) if m.group(1) == "icml23-one-step")
    section = committed[begin.start():committed.index(END, begin.end()) + len(END)] + "\n"
    row, off = _one_step_row(section)
    page = tmp_path / "RESULTS.md"
    page.write_text(section.replace(row, off), encoding="utf-8")
    # Its figure beside the page, one number of its data 2% off.
    figure = RESULTS_PAGE.parent / "img" / "icml23-one-step.csv"
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / figure.name).write_text(_figure_off(figure), encoding="utf-8")
    assert main(["results-page", str(page), "--check"]) == 1
    said = capsys.readouterr().out
    assert "differs from its shipped runs: icml23-one-step --preset cpu --seeds 0-2" in said
    assert "1 section(s), 1 differ" in said and off in page.read_text(encoding="utf-8")
    assert main(["results-page", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == section
    # The figure is drawn again from the shipped runs: the committed data, and its PNG.
    assert (tmp_path / "img" / figure.name).read_bytes() == figure.read_bytes()
    assert (tmp_path / "img" / "icml23-one-step.png").stat().st_size > 0


@pytest.mark.parametrize(("marker", "said"), [
    ("icml23-sine --preset bogus --seeds 0-2", "--preset must be one of quick, cpu, paper"),
    ("icml23-sine --preset cpu --seeds 0-x", "seeds must look like"),
    ("icml23-sinus --preset cpu --seeds 0-2", "icml23-sinus"),
])  # fmt: skip
def test_a_results_page_section_naming_what_does_not_exist_is_one_line(
    marker, said, tmp_path, capsys
):
    """A section marker with a misspelt table, preset or seeds: one line naming the section,
    exit 2, before any bundle is read, and the page unchanged."""
    page = tmp_path / "RESULTS.md"
    text = f"<!-- shipped table: {marker} -->\nbefore\n<!-- end shipped table -->\n"
    page.write_text(text, encoding="utf-8")
    assert main(["results-page", str(page)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: results page, section {marker}: ") and said in line, line
    assert page.read_text(encoding="utf-8") == text
    assert not any(tmp_path.glob("*/mlflow.db"))


@pytest.mark.slow  # every shipped table imported, judged and drawn (~40 CPU-s, growing)
def test_the_results_page_is_what_its_shipped_runs_give(tmp_path):
    """The committed page and figures are what `results-page` writes from shipped_runs/,
    each table judged from its own bundle alone; an edited number, in the page or in a
    figure's data, is the one section named."""
    import shutil

    from benchmarks.published.results_page import ScratchStores, regenerate

    committed = RESULTS_PAGE.read_text(encoding="utf-8")
    row, off = _one_step_row(committed)
    # The committed figures, one of them (mqar's) with a number of its data 2% off.
    figures = tmp_path / "committed"
    shutil.copytree(RESULTS_PAGE.parent / "img", figures)
    (figures / "mqar.csv").write_text(_figure_off(figures / "mqar.csv"), encoding="utf-8")
    drawn = tmp_path / "drawn"
    drawn.mkdir()
    text, changed = regenerate(committed.replace(row, off), ScratchStores(tmp_path / "stores"),
                               drawn, figures)  # fmt: skip
    assert changed == ["icml23-one-step --preset cpu --seeds 0-2",
                       "mqar --preset cpu --seeds 0-2 (its figure)"]  # fmt: skip
    assert text == committed


def test_the_results_pages_verdict_summaries_count_what_each_generated_section_says():
    """Each row of a hand-kept "| table | reproduced | ..." summary in RESULTS.md whose table
    ships its runs holds the counts of that table's generated "Verdicts:" line, and each
    summary's "all" row their sum: a section regenerated with new lines cannot leave a
    stale count beside it."""
    page = RESULTS_PAGE.read_text(encoding="utf-8")
    kinds = ("reproduced", "inconclusive", "not reproduced", "not run")
    generated = {}
    for table, line in re.findall(r"<!-- shipped table: (\S+) .*?^Verdicts: (.*?)\.?$", page,
                                  re.S | re.M):  # fmt: skip
        counts = dict.fromkeys(kinds, 0)
        for part in [] if line.startswith("none:") else line.split(", "):
            number, kind = part.split(" ", 1)
            counts[kind] = int(number)
        generated[table] = [counts[k] for k in kinds]
    header = "| table | reproduced | inconclusive | not reproduced | not run |"
    summaries = page.split(header)[1:]
    assert summaries, "no verdict summary on the page"
    checked = 0
    for summary in summaries:
        rows = re.findall(r"^\| `([^`]+)`[^|]* \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$",
                          summary.split("| **all** |")[0], re.M)  # fmt: skip
        total = re.search(r"^\| \*\*all\*\* \| \*\*(\d+)\*\* \| \*\*(\d+)\*\* \| "
                          r"\*\*(\d+)\*\* \| \*\*(\d+)\*\* \|$", summary, re.M)  # fmt: skip
        sums = [sum(int(row[i]) for row in rows) for i in range(1, 5)]
        assert total and [int(v) for v in total.groups()] == sums
        for table, *counts in rows:
            if table in generated:
                assert [int(c) for c in counts] == generated[table], table
                checked += 1
    assert checked >= 10


def test_the_coverage_summary_counts_its_rows():
    """RESULTS.md's coverage summary (per paper: experiments, CPU-feasible, fully, partly,
    not covered) is the count of its one-row-per-experiment table: a row whose "covered by"
    starts with "none" is not covered, one that says "partly" before its first colon is
    partly covered, any other is fully; a row is CPU-feasible when its last cell says yes."""
    page = RESULTS_PAGE.read_text(encoding="utf-8")
    listing = page[page.index("<details><summary>Every experiment"):]
    listing = listing[:listing.index("</details>")]
    names = {"ICML'23": "ICML'23", "GD-SSM": "GD-SSM", "blog": "ICLR'24", "thesis": "thesis"}
    counted: dict[str, list[int]] = {}
    for line in listing.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 5 or cells[0] not in names:
            continue
        paper, covered, feasible = names[cells[0]], cells[3], cells[4].startswith("yes")
        kind = (2 if covered.startswith("none") else
                1 if "partly" in covered.split(":")[0] else 0)  # fmt: skip
        row = counted.setdefault(paper, [0, 0, 0, 0, 0])
        row[0] += 1
        if feasible:
            row[1] += 1
            row[2 + kind] += 1
    summary = {}
    for paper in names.values():
        match = re.search(rf"^\| {re.escape(paper)}[^|]* \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| "
                          r"(\d+) \|$", page, re.M)  # fmt: skip
        assert match, paper
        summary[paper] = [int(v) for v in match.groups()]
    assert summary == counted
    total = re.search(r"^\| \*\*all four\*\* \| " + r" \| ".join([r"\*\*(\d+)\*\*"] * 5)
                      + r" \|$", page, re.M)  # fmt: skip
    sums = [sum(column) for column in zip(*counted.values(), strict=True)]
    assert total and [int(v) for v in total.groups()] == sums


def test_no_cell_has_two_runs_across_the_shipped_bundles():
    """A cell (configuration and seed) several tables read is the same run in each of
    their bundles: a board or figure that reads two bundles reads one number for it."""
    from benchmarks.store.shipped import CONFIG_TAG, SEED_TAG, shipped_bundles

    runs: dict[tuple[str, str], dict[str, str]] = {}
    for path in shipped_bundles():
        for run in read_bundle(path).runs:
            cell = run["tags"][CONFIG_TAG], run["tags"][SEED_TAG]
            runs.setdefault(cell, {})[path.stem] = run["source_run"]
    split = {cell: held for cell, held in runs.items() if len(set(held.values())) > 1}
    assert not split, f"{len(split)} cell(s) with different runs by bundle, e.g. " \
                      f"{next(iter(split.items()))}"


def test_every_final_metric_the_shipped_runs_hold_is_declared():
    """Each final metric declares which way is better (or that it scores nothing), and
    whether it measures the machine: verify skips those by the declaration's name rule. The
    blog's line-search timings once shipped as `final/gd/line_search_s`, undeclared, and
    verify compared them as results."""
    from benchmarks.metrics.catalog import RECORDED_TAG, declare_recorded, is_declared
    from benchmarks.store.shipped import shipped_bundles

    undeclared: dict[str, str] = {}
    for path in shipped_bundles():
        for run in read_bundle(path).runs:
            declare_recorded(run["tags"].get(RECORDED_TAG, "[]"))  # its protocol's own
            undeclared.update({key: path.stem for key in run["metrics"]
                               if key.startswith("final/") and not is_declared(key)})  # fmt: skip
    assert not undeclared, f"undeclared final metrics (and a bundle holding each): {undeclared}"
