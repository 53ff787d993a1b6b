"""A ranked board holds runs of one task and protocol setting and one kind: other settings,
evaluations and plugin code that changed are listed apart or kept in rows of their own,
never ranked with the rest; references are matched one by one."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from benchmarks.cli.main import main
from tests.helpers import fake_run, leaderboard_json


def _rows(board: dict, status: str) -> list[dict]:
    return [r for r in board["rows"] if r["status"] == status]


def test_a_shorter_stream_is_listed_apart_and_references_still_stand_beside(store, capsys):
    """Before: a 5-task run (an easier stream) ranked first among 20-task runs, and it
    pushed every published row out as 'settings differ'."""
    benchmark = "mnist-rotations"
    fake_run(store, "lamaml", 0, {"final/ra": 0.70, "final/bti": -0.1}, benchmark=benchmark)
    fake_run(store, "lamaml", 1, {"final/ra": 0.72, "final/bti": -0.1}, benchmark=benchmark)
    fake_run(store, "online_sgd", 0, {"final/ra": 0.50, "final/bti": -0.1}, benchmark=benchmark)
    fake_run(store, "er", 0, {"final/ra": 0.95, "final/bti": -0.01}, benchmark=benchmark,
             tasks="5")  # fmt: skip
    board = leaderboard_json(store, capsys, "--benchmark", benchmark)
    ranked = [r["method"] for r in _rows(board, "ranked")]
    assert ranked == ["lamaml", "online_sgd"]  # the 20-task stream: the benchmark's own
    (apart,) = _rows(board, "other settings")
    assert apart["method"] == "er" and apart["rank"] is None
    assert apart["other_setting"] == {"task.tasks": {"this_row": "5", "ranked": "20"}}
    assert apart["stats"]["final/ra"]["mean"] == pytest.approx(0.95)
    # The published rows were measured on 20 x 1000: they stand beside the ranked rows.
    beside = {r["method"] for r in _rows(board, "reference")}
    assert {"lamaml", "sparse_lamaml", "online_sgd", "gem", "mer"} <= beside
    assert not _rows(board, "reference, settings differ")
    # Ranking the 5-task setting instead: the references no longer match, and say why.
    five = leaderboard_json(store, capsys, "--benchmark", benchmark, "--param", "tasks=5")
    assert [r["method"] for r in _rows(five, "ranked")] == ["er"]
    moved = _rows(five, "reference, settings differ")
    assert moved and all(r["reference"]["settings_differ"]["task.tasks"]
                         == {"ours": "5", "theirs": "20"} for r in moved)  # fmt: skip


def test_another_task_family_or_range_never_ranks_with_the_benchmarks_own(store, capsys):
    fake_run(store, "maml", 0, {"final/test_loss": 0.50})
    fake_run(store, "maml", 1, {"final/test_loss": 0.52})
    fake_run(store, "fomaml", 0, {"final/test_loss": 0.60})
    # Easier tasks (a narrower amplitude range) score lower: before, ranked first.
    fake_run(store, "anil", 0, {"final/test_loss": 0.01}, amplitude="0.1,0.2")
    board = leaderboard_json(store, capsys)
    assert [r["method"] for r in _rows(board, "ranked")] == ["maml", "fomaml"]
    (apart,) = _rows(board, "other settings")
    assert apart["method"] == "anil"
    assert set(apart["other_setting"]) == {"task.amplitude"}
    assert "amplitude=" in apart["config"] and "(ranked: (0.1, 5.0))" in apart["config"]
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "markdown"]) == 0
    caption = capsys.readouterr().out
    assert "1 row(s) of other task or protocol settings, or evaluations, listed apart" in caption


def test_evaluations_never_share_a_ranking_with_training_runs(store, capsys):
    from benchmarks.planning.plan import plan_run
    from benchmarks.store.tracking import MlflowTracker

    trained = fake_run(store, "maml", 0, {"final/test_loss": 0.50})
    fake_run(store, "fomaml", 0, {"final/test_loss": 0.60})
    # An evaluation of maml's learner at twice the input range, as `evaluate` records it.
    plan = plan_run("maml", "sinusoid-5shot", 0, {"input_range": "-10,10"}, device="cpu")
    tracker = MlflowTracker(store)
    tracker.start(dataclasses.replace(plan, learner_from=trained), "built-in",
                  extra_tags={"mesabench.trained_on": "sinusoid-5shot",
                              "mesabench.evaluated_from": trained})  # fmt: skip
    tracker.log_metrics({"final/test_loss": 9.0}, step=1)
    tracker.finish("FINISHED")
    board = leaderboard_json(store, capsys)
    assert [r["method"] for r in _rows(board, "ranked")] == ["maml", "fomaml"]
    (apart,) = _rows(board, "other settings")
    assert apart["other_setting"]["kind"] == {
        "this_row": "evaluation of a learner trained on sinusoid-5shot", "ranked": "training"}
    # An evaluation at the training settings is still an evaluation: apart as well.
    evaluations = leaderboard_json(store, capsys, "--param", "input_range=(-10.0, 10.0)")
    (only,) = _rows(evaluations, "ranked")
    assert only["method"] == "maml" and only["stats"]["final/test_loss"]["mean"] == 9.0


def test_rows_of_a_plugin_whose_code_changed_are_not_pooled(store, capsys):
    """Same distribution version, different code (an edited, editable install): the runs
    record their code digests and form rows of their own, labelled by digest."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    for seed, (loss, code) in enumerate(((0.5, "aaaa1111"), (0.52, "aaaa1111"), (0.1, "bbbb2222"))):
        run_id = fake_run(store, "maml", seed, {"final/test_loss": loss})
        client.set_tag(run_id, "mesabench.method_code", code)
    board = leaderboard_json(store, capsys)
    rows = _rows(board, "ranked")
    assert [(r["n"], r["config"]) for r in rows] == [(1, "code bbbb2222"), (2, "code aaaa1111")]
    pooled = leaderboard_json(store, capsys, "--group-by", "method")
    assert len(_rows(pooled, "ranked")) == 2  # pooling settings never pools code


def test_a_built_in_cell_run_again_with_other_code_is_kept_in_a_row_of_its_own(store, capsys):
    """Built-ins record their code's digest as plugins record theirs. A cell run
    with one code and again with another (a bundle made at another commit, or a run from
    before digests, '') is not a repeat to drop: each code keeps its run, in its own row."""
    from mlflow.tracking import MlflowClient

    from benchmarks.catalog.installed import code_digest, method_entry

    client = MlflowClient(tracking_uri=store)
    here = fake_run(store, "maml", 0, {"final/test_loss": 0.5})
    installed = code_digest(method_entry("maml").cls)
    assert client.get_run(here).data.tags["mesabench.method_code"] == installed
    older = fake_run(store, "maml", 0, {"final/test_loss": 0.9})
    client.delete_tag(older, "mesabench.method_code")  # as recorded before digests
    board = leaderboard_json(store, capsys)
    assert board["duplicates_dropped"] == 0
    rows = _rows(board, "ranked")
    assert sorted((r["config"], r["stats"]["final/test_loss"]["mean"]) for r in rows) == [
        (f"code {installed[:8]}", 0.5), ("code unrecorded", 0.9)]
    fake_run(store, "maml", 0, {"final/test_loss": 0.4})  # the same code: a repeat
    board = leaderboard_json(store, capsys)
    assert board["duplicates_dropped"] == 1
    assert sorted(r["stats"]["final/test_loss"]["mean"] for r in _rows(board, "ranked")) == [
        0.4, 0.9]


def test_the_code_digest_follows_the_source_of_the_plugins_package(tmp_path, monkeypatch):
    from benchmarks.catalog.installed import code_digest

    package = tmp_path / "digest_probe_pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "method.py").write_text("class Learner:\n    pass\n")
    (package / "helpers.py").write_text("SCALE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def digest() -> str:
        for name in [m for m in sys.modules if m.startswith("digest_probe_pkg")]:
            del sys.modules[name]
        from digest_probe_pkg.sub.method import Learner

        code_digest.cache_clear()
        return code_digest(Learner)

    first = digest()
    assert len(first) == 16 and digest() == first
    # A change anywhere in the package (here a helper the method may import) changes it.
    (package / "helpers.py").write_text("SCALE = 2\n")
    second = digest()
    assert second != first
    (package / "helpers.py").write_text("SCALE = 1\n")
    assert digest() == first
    # Independent recomputation: SHA-256 over (relative path, NUL, bytes), sorted by path.
    import hashlib

    h = hashlib.sha256()
    for rel in sorted(["__init__.py", "helpers.py", "sub/__init__.py", "sub/method.py"]):
        h.update(f"{rel}\0".encode() + (package / rel).read_bytes())
    assert first == h.hexdigest()[:16]


@pytest.mark.parametrize("shots", [1, 5])
def test_table_41_references_declare_their_settings_and_match_only_runs_like_them(shots):
    """miniImageNet's published rows (MAML paper; the thesis' table 4.1) declare the
    settings behind them, so that a run at the benchmark defaults (5 inner steps, 60k
    iterations, 64 channels) is not ranked beside sparse-MAML's 35-step, 40k-iteration
    number, while a run at the matching preset is."""
    from benchmarks.catalog.references import references_for
    from benchmarks.planning.plan import plan_run

    benchmark = f"miniimagenet-5w{shots}s"
    rows = {r.method: r for r in references_for(benchmark)}
    assert set(rows) == {"maml", "fomaml", "sparse_maml", "sparse_relu_maml"}
    for row in rows.values():
        declared = {k.split(".", 1)[1] for k in row.settings}
        assert {"shots", "channels", "inner_lr", "inner_steps", "eval_steps", "meta_batch",
                "iterations", "first_order"} <= declared, row.method  # fmt: skip
    for method, preset in (("maml", "paper-32ch"), ("fomaml", "paper-32ch"),
                           ("sparse_maml", "sparse-maml"), ("sparse_relu_maml", "sparse-maml")):
        params = plan_run(method, benchmark, device="cpu", preset=preset).flat_params()
        assert rows[method].differences(params) == {}, method
        defaults = plan_run(method, benchmark, device="cpu").flat_params()
        assert rows[method].differences(defaults), method
    # The default sparse-MAML run differs from its row in the inner loop and the budget.
    defaults = plan_run("sparse_maml", benchmark, device="cpu").flat_params()
    assert {"method.inner_steps", "protocol.iterations"} <= set(
        rows["sparse_maml"].differences(defaults))  # fmt: skip


def test_the_protocol_linter_flags_rows_in_one_line_each_and_can_refuse_them(store, capsys):
    """Few test episodes on a few-shot benchmark (below its declared 600), a cross-domain
    test on a set sharing the training set's source, runs of one row that read different
    data, a protocol that selects on test data, a reference declaring no settings: each one
    line naming the row, on stderr; --refuse-flagged takes the flagged rows out of the
    ranking."""
    from benchmarks.catalog.references import ReferenceRow
    from benchmarks.planning.lint import DATA_DIGEST_TAG, SELECTED_ON_TAG
    from benchmarks.results.board import LeaderboardRow
    from benchmarks.results.linter import row_findings
    from benchmarks.store.tracking import MlflowTracker

    bench = "omniglot-5w1s"
    fake_run(store, "maml", 0, {"final/test_accuracy": 0.9}, benchmark=bench)
    few = fake_run(store, "fomaml", 0, {"final/test_accuracy": 0.95}, benchmark=bench,
                   test_tasks="100")  # fmt: skip
    client = MlflowTracker(store).client
    for seed, digest in ((0, "aaaa"), (1, "bbbb")):
        run = fake_run(store, "anil", seed, {"final/test_accuracy": 0.8}, benchmark=bench)
        client.set_tag(run, DATA_DIGEST_TAG, digest)
    capsys.readouterr()
    assert main(["leaderboard", "--benchmark", bench, "--tracking-uri", store]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith(f"flagged: {bench} fomaml (") and "100 test episodes, fewer "
               f"than the 600 {bench} declares" in line for line in lines)  # fmt: skip
    assert any(f"{bench} anil (" in line and "read different data (2 different" in line
               for line in lines)  # fmt: skip
    assert not any(" maml (" in line for line in lines)
    board = leaderboard_json(store, capsys, "--benchmark", bench, "--refuse-flagged")
    ranked = {r["method"] for r in board["rows"] if r["status"] == "ranked"}
    assert ranked == {"maml"}
    flagged = {r["method"]: r["flagged"] for r in board["rows"] if r["status"] == "flagged"}
    assert set(flagged) == {"anil"} and len(flagged["anil"]) == 1
    # (fewer test episodes is another protocol setting too: listed apart, flagged there)
    (few_row,) = [r for r in board["rows"] if r["method"] == "fomaml"]
    assert few_row["status"] == "other settings" and len(few_row["flagged"]) == 1
    assert client.get_run(few).data.tags[SELECTED_ON_TAG].startswith("meta-validation")
    # Cross-domain on one source, and a protocol that says it selects on test data.
    from benchmarks.catalog.installed import benchmark_spec
    from benchmarks.planning.lint import plan_findings
    from benchmarks.planning.plan import plan_run

    plan = plan_run("maml", "miniimagenet-5w1s", 0, {"test_dataset": "tiered_imagenet"},
                    device="cpu")  # fmt: skip
    (finding,) = plan_findings(plan, benchmark_spec("miniimagenet-5w1s"))
    assert "meta-tested on tiered_imagenet after training on miniimagenet" in finding
    cub = plan_run("maml", "miniimagenet-5w1s", 0, {"test_dataset": "cub"}, device="cpu")
    assert plan_findings(cub, benchmark_spec("miniimagenet-5w1s")) == []
    from benchmarks.store.reader import open_reader

    run = open_reader(store).run(few)
    run.tags[SELECTED_ON_TAG] = "test split"
    row = LeaderboardRow("fomaml", [run])
    assert any("model selected on test data (test split)" in f for f in row_findings(row))
    bare = LeaderboardRow("x", [], reference=ReferenceRow("x", "someone 2020", {"final/a": 1}))
    assert row_findings(bare) == ["reference someone 2020: declares none of the settings it "
                                  "was measured under"]  # fmt: skip


def test_each_row_shows_the_settings_chosen_for_it_beside_the_defaults(store, capsys):
    """A row says which method settings a user or a preset chose (here maml's five inner
    steps and fomaml's outer rate), even where no other row differs in them; a row at the
    defaults says nothing more; a plan's departures leave out what the layers below set."""
    from benchmarks.planning.plan import plan_run

    assert plan_run("maml", seed=0, overrides={"inner_steps": "5"}).departures() == {
        "method.inner_steps": "5"}  # fmt: skip
    assert plan_run("sparse_maml", seed=0).departures() == {}  # the variant's own defaults
    fake_run(store, "maml", 0, {"final/test_loss": 0.5}, inner_steps="5")
    fake_run(store, "fomaml", 0, {"final/test_loss": 0.6}, outer_lr="0.003")
    fake_run(store, "anil", 0, {"final/test_loss": 0.7})
    fake_run(store, "metasgd", 0, {"final/test_loss": 0.8}, hidden="16,16")
    rows = {row["method"]: row["config"] for row in leaderboard_json(store, capsys)["rows"]}
    assert rows["maml"].endswith("set: inner_steps=5")
    assert rows["fomaml"].endswith("set: outer_lr=0.003")
    assert rows["metasgd"].endswith("set: hidden=(16, 16)")  # a value with ", " whole
    assert "set:" not in rows["anil"]


def test_rows_not_significantly_worse_than_the_best_are_marked(store, capsys):
    """Paired over five shared seeds against rank 1: a row a hair behind with noise is
    marked tied (≈1), a row clearly behind on every seed is not, and one seed says nothing."""
    best = [0.50, 0.52, 0.49, 0.51, 0.50]
    close = [0.51, 0.50, 0.52, 0.50, 0.51]  # mean +0.004, differences of both signs
    far = [b + 0.2 + 0.01 * i for i, b in enumerate(best)]
    for seed in range(5):
        fake_run(store, "maml", seed, {"final/test_loss": best[seed]})
        fake_run(store, "fomaml", seed, {"final/test_loss": close[seed]})
        fake_run(store, "anil", seed, {"final/test_loss": far[seed]})
    fake_run(store, "metasgd", 0, {"final/test_loss": 0.55})
    board = leaderboard_json(store, capsys)
    ties = {row["method"]: row["tied_with_best"] for row in board["rows"]}
    assert ties == {"maml": None, "fomaml": True, "anil": False, "metasgd": None}
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    assert "| 2 ≈1 | fomaml" in text and "≈1 = not significantly worse than rank 1" in text


def test_a_built_ins_digest_covers_what_it_imports_and_nothing_else(tmp_path):
    """A built-in's code is its module and the modules of `methods` it imports, at any
    depth (inside functions too), not the package's registering __init__ files: an edit to
    an in-context learner leaves MAML's digest, and its runs' rows, as they were."""
    import hashlib

    import methods
    from benchmarks.catalog.installed import _imported_closure, code_digest, method_entry

    package = tmp_path / "probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from probe_pkg import a, d  # registers\n")
    (package / "a.py").write_text("import os\n\ndef f():\n    from probe_pkg.b import g\n")
    # Another package's module whose path matches one of probe_pkg's (``other.d``): not it.
    (package / "b.py").write_text("from probe_pkg import c\nimport probe_pkg.missing\n"
                                  "from other.d import thing\n")
    (package / "c.py").write_text("")
    (package / "d.py").write_text("")
    assert [p.name for p in _imported_closure("probe_pkg.a", package)] == ["a.py", "b.py",
                                                                          "c.py"]
    root = Path(methods.__file__).parent
    maml = method_entry("maml").cls
    closure = [p.relative_to(root).as_posix() for p in _imported_closure(maml.__module__, root)]
    assert {"gradient/maml.py", "gradient/inner_loop.py", "api.py"} <= set(closure)
    assert not [name for name in closure if name.startswith(("in_context/", "analyses/"))]
    assert "__init__.py" not in {Path(name).name for name in closure}
    digest = hashlib.sha256()
    for name in sorted(closure):
        digest.update(f"{name}\0".encode() + (root / name).read_bytes())
    assert code_digest(maml) == digest.hexdigest()[:16]
