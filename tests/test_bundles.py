"""Bundles: runs exported from one store and imported into another (a real SQLite store,
the command line in-process), the boards they give, and every bad input refused."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from benchmarks.store.bundles import VERSION, checksum
from tests.helpers import TINY, stored_runs

BENCHMARK = "sinusoid-5shot"


@pytest.fixture(scope="module")
def source(tmp_path_factory, _store_template) -> str:
    """A store with three closed runs, trained once for the module: fomaml seeds 0 and 1,
    maml seed 0 (read only by the tests; each copies it where it writes)."""
    db = tmp_path_factory.mktemp("source") / "mlflow.db"
    shutil.copyfile(_store_template, db)
    uri = f"sqlite:///{db}"
    for method, seed in (("fomaml", "0"), ("fomaml", "1"), ("maml", "0")):
        assert main(["run", "--method", method, "--seed", seed, *TINY, "--tracking-uri", uri]) == 0
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return uri


def _board(uri: str, capsys) -> list:
    capsys.readouterr()
    assert main(["leaderboard", "--benchmark", BENCHMARK, "--format", "json",
                 "--tracking-uri", uri]) == 0  # fmt: skip
    return json.loads(capsys.readouterr().out)


def _without_ids(boards: list) -> list:
    """Boards with the fields that name runs of one store (or say where they came from)
    taken out: what must be equal between a store and a copy made by export and import."""
    boards = copy.deepcopy(boards)
    for board in boards:
        for row in board["rows"]:
            row["run_ids"] = len(row["run_ids"])
            row["config"] = re.sub(r"(; )?imported: .*$", "", row["config"])
            row.pop("imported")
    return boards


def test_a_round_trip_gives_the_same_board_and_imports_each_run_once(source, new_store,
                                                                     tmp_path, capsys):  # fmt: skip
    bundle = tmp_path / "runs.mesabundle"
    assert main(["export", str(bundle), "--tracking-uri", source]) == 0
    again = tmp_path / "again.mesabundle"
    assert main(["export", str(again), "--tracking-uri", source]) == 0
    assert bundle.read_bytes() == again.read_bytes()  # the same runs, the same bytes
    target = new_store("target")
    assert main(["import", str(bundle), "--tracking-uri", target]) == 0
    assert "imported 3 run(s)" in capsys.readouterr().out
    assert main(["import", str(bundle), "--tracking-uri", target]) == 0  # idempotent
    assert "imported 0 run(s)" in capsys.readouterr().out
    assert len(stored_runs(target)) == 3
    theirs, ours = _board(source, capsys), _board(target, capsys)
    assert _without_ids(ours) == _without_ids(theirs)
    # Imported rows say so on the board, and each run keeps its provenance.
    rows = [row for board in ours for row in board["rows"]]
    assert rows and all(row["imported"] and "imported: " in row["config"] for row in rows)
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()
    sources = {r.info.run_id for r in stored_runs(source)}
    for run in stored_runs(target):
        tags = run.data.tags
        assert tags["mesabench.imported_from"] == "runs.mesabundle"
        assert tags["mesabench.bundle_digest"] == digest
        assert tags["mesabench.source_run"] in sources
        assert run.info.status == "FINISHED"
        # Where its numbers were made travels with it.
        assert tags["mesabench.torch_version"] == torch.__version__
        assert f"{os.cpu_count()} CPU cores, {torch.get_num_threads()} torch thread" in tags[
            "mesabench.machine"]
        # The resolved plan travels: the run can be read as any other.
        client = MlflowClient(target)
        plan = json.loads(Path(client.download_artifacts(run.info.run_id, "config.json",
                                                         str(tmp_path))).read_text())  # fmt: skip
        assert plan["method_name"] == tags["mesabench.method"]
    # Back into the store it came from: nothing is added (its runs are its own).
    own = tmp_path / "own" / "mlflow.db"
    own.parent.mkdir()
    shutil.copyfile(Path(source.removeprefix("sqlite:///")), own)
    assert main(["import", str(bundle), "--tracking-uri", f"sqlite:///{own}"]) == 0
    assert "imported 0 run(s)" in capsys.readouterr().out
    # Passed on: the target's export of what it imported keeps each run's first identity,
    # so it is nothing new to the store it came from, nor to one that has the first bundle.
    onward = tmp_path / "onward.mesabundle"
    assert main(["export", str(onward), "--tracking-uri", target]) == 0
    assert {r["source_run"] for r in json.loads(gzip.decompress(onward.read_bytes()))["runs"]} == (
        sources)  # fmt: skip
    assert main(["import", str(onward), "--tracking-uri", f"sqlite:///{own}"]) == 0
    assert "imported 0 run(s)" in capsys.readouterr().out
    assert main(["import", str(onward), "--tracking-uri", target]) == 0
    assert "imported 0 run(s)" in capsys.readouterr().out
    assert len(stored_runs(f"sqlite:///{own}")) == len(stored_runs(source))


def test_an_export_chooses_by_method_and_run_id_and_keeps_histories_on_request(
    source, new_store, tmp_path, capsys
):
    (maml,) = [r for r in stored_runs(source) if r.data.tags["mesabench.method"] == "maml"]
    chosen = tmp_path / "maml.mesabundle"
    assert main(["export", str(chosen), "--method", "maml", "--histories",
                 "--tracking-uri", source]) == 0  # fmt: skip
    by_id = tmp_path / "by-id.mesabundle"
    assert main(["export", str(by_id), "--run-id", maml.info.run_id, "--histories",
                 "--tracking-uri", source]) == 0  # fmt: skip
    assert chosen.read_bytes() == by_id.read_bytes()
    (run,) = json.loads(gzip.decompress(chosen.read_bytes()))["runs"]
    assert run["source_run"] == maml.info.run_id and run["histories"]
    target = new_store("target")
    assert main(["import", str(chosen), "--tracking-uri", target]) == 0
    (imported,) = stored_runs(target)
    logged = [k for k in maml.data.metrics if not k.startswith("final/")]
    assert logged
    for key in logged:  # every history, step by step
        there, here = (MlflowClient(uri).get_metric_history(run.info.run_id, key)
                       for uri, run in ((source, maml), (target, imported)))  # fmt: skip
        assert [(m.step, m.value) for m in here] == [(m.step, m.value) for m in there]


def _rewrite(bundle: Path, change) -> Path:
    document = json.loads(gzip.decompress(bundle.read_bytes()))
    change(document)
    out = bundle.with_name("changed.mesabundle")
    out.write_bytes(gzip.compress(json.dumps(document).encode()))
    return out


def _tamper(document):
    document["runs"][0]["metrics"]["final/test_loss"] = 0.0001


def _newer(document):
    document["version"] = VERSION + 1


def _unknown_method(document):
    run = document["runs"][0]
    run["tags"]["mesabench.method"] = "no_such_method"
    run["checksum"] = checksum(run)  # a well-made bundle of a method not installed here


def _unknown_benchmark(document):
    run = document["runs"][0]
    run["benchmark"] = "no-such-benchmark"
    run["checksum"] = checksum(run)


@pytest.mark.parametrize("change, words", [
    (_tamper, "fails its checksum"),
    (_newer, f"reads up to version {VERSION}: upgrade mesabench"),
    (_unknown_method, "unknown method 'no_such_method'"),
    (_unknown_benchmark, "no-such-benchmark"),
])  # fmt: skip
def test_a_bad_bundle_is_refused_in_one_line_and_nothing_is_imported(
    source, new_store, tmp_path, capsys, change, words
):
    bundle = tmp_path / "runs.mesabundle"
    assert main(["export", str(bundle), "--tracking-uri", source]) == 0
    bad = _rewrite(bundle, change)
    target = new_store("target")
    capsys.readouterr()
    assert main(["import", str(bad), "--tracking-uri", target]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert "nothing imported" in err or "import:" in err, err
    assert stored_runs(target) == []


def test_an_export_to_an_unwritable_path_is_refused_in_one_line(source, tmp_path, capsys):
    assert main(["export", str(tmp_path / "no" / "such" / "b.mesabundle"),
                 "--tracking-uri", source]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "export: cannot write" in err and len(err.strip().splitlines()) == 1
    assert main(["export", str(tmp_path / "b.mesabundle"), "--method", "mamll",
                 "--tracking-uri", source]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "method 'mamll'" in err and "fomaml, maml" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("**/.*.partial"))  # nothing half-written left behind


def test_verify_reruns_sampled_cells_and_records_agreement_or_a_planted_mismatch(
    source, new_store, tmp_path, capsys
):
    bundle = tmp_path / "runs.mesabundle"
    assert main(["export", str(bundle), "--tracking-uri", source]) == 0
    target = new_store("target")
    capsys.readouterr()
    assert main(["verify", str(bundle), "--cells", "1", "--tracking-uri", target]) == 2
    assert "import the bundle first" in capsys.readouterr().err  # nothing to verify yet
    assert main(["import", str(bundle), "--tracking-uri", target]) == 0
    for cells in ("0", "4"):  # 3 finished runs in the bundle
        assert main(["verify", str(bundle), "--cells", cells, "--tracking-uri", target]) == 2
        assert "--cells must be 1 to 3" in capsys.readouterr().err
    assert main(["verify", str(bundle), "--cells", "2", "--seed", "1",
                 "--tracking-uri", target]) == 0  # fmt: skip
    assert "2 agree, 0 mismatch" in capsys.readouterr().out
    verdicts = [r.data.tags.get("mesabench.verified", "") for r in stored_runs(target)]
    assert sum(v.startswith("identical") for v in verdicts) == 2  # same platform: same bits
    rows = [row for board in _board(target, capsys) for row in board["rows"]]
    assert any("verified: 1 re-run(s) agree" in row["config"]
               or "verified: 2 re-run(s) agree" in row["config"] for row in rows)  # fmt: skip
    # A bundle that claims a number its cell does not give (well made: checksums hold).
    planted = _rewrite(bundle, _claim_better)
    other = new_store("other")
    assert main(["import", str(planted), "--tracking-uri", other]) == 0
    capsys.readouterr()
    assert main(["verify", str(planted), "--cells", "3", "--tracking-uri", other]) == 1
    assert "2 agree, 1 mismatch" in capsys.readouterr().out
    (bad,) = [r for r in stored_runs(other)
              if r.data.tags["mesabench.verified"].startswith("MISMATCH")]  # fmt: skip
    assert "final/test_loss 0.0001 claimed" in bad.data.tags["mesabench.verified"]
    rows = [row for board in _board(other, capsys) for row in board["rows"]]
    assert any("verify: 1 of " in row["config"] and "MISMATCH" in row["config"] for row in rows)


def _claim_better(document):
    run = document["runs"][0]
    run["metrics"]["final/test_loss"] = 0.0001
    run["checksum"] = checksum(run)


def test_an_import_cut_short_and_since_closed_as_lost_is_replaced(source, new_store, tmp_path,
                                                                  capsys):  # fmt: skip
    """Its copy was left RUNNING, then ``runs --stale --mark-failed`` closed it FAILED:
    the next import replaces it, and each cell is FINISHED once."""
    from benchmarks.store.lifecycle import mark_lost

    bundle = tmp_path / "runs.mesabundle"
    assert main(["export", str(bundle), "--tracking-uri", source]) == 0
    target = new_store("target")
    assert main(["import", str(bundle), "--tracking-uri", target]) == 0
    cut = stored_runs(target)[0].info.run_id
    client = MlflowClient(target)
    client.set_terminated(cut, status="RUNNING")
    mark_lost(client, cut, "lost: no heartbeat since 12:00")
    capsys.readouterr()
    assert main(["import", str(bundle), "--tracking-uri", target]) == 0
    assert "imported 1 run(s)" in capsys.readouterr().out
    runs = stored_runs(target)
    assert len(runs) == 3 and cut not in {r.info.run_id for r in runs}
    assert {r.info.status for r in runs} == {"FINISHED"}


def test_a_bundle_can_carry_the_histories_of_chosen_metrics_only(source, new_store, tmp_path):
    """What a shipped table carries: the histories its figure draws, the other metrics'
    last values; imported, the chosen histories are whole and the rest read as before."""
    from benchmarks.store.bundles import bundle_bytes, import_bundle, read_bundle, run_body
    from benchmarks.store.tracking import MlflowTracker

    (maml,) = [r for r in stored_runs(source) if r.data.tags["mesabench.method"] == "maml"]
    client = MlflowClient(source)
    body = run_body(client, maml, {"train/loss", "no/such_metric"}, tmp_path)
    assert set(body["histories"]) == {"train/loss"}
    path = tmp_path / "chosen.mesabundle"
    path.write_bytes(bundle_bytes([body], "test"))
    target = new_store("chosen")
    import_bundle(MlflowTracker(target), read_bundle(path))
    (imported,) = stored_runs(target)
    here = MlflowClient(target)
    history = [(m.step, m.value) for m in here.get_metric_history(imported.info.run_id,
                                                                  "train/loss")]  # fmt: skip
    assert history == [(m.step, m.value) for m in client.get_metric_history(maml.info.run_id,
                                                                              "train/loss")]
    assert len(history) > 1
    assert imported.data.metrics == maml.data.metrics  # every last value as the source has it
    val = here.get_metric_history(imported.info.run_id, "val/loss")
    assert [m.step for m in val] == [0]  # no history asked: its last value alone


def test_verify_holds_another_platforms_run_to_the_benchmarks_tolerance_and_ours_to_the_bit():
    """A run made elsewhere (another machine or torch) is held to the benchmark's relative
    tolerance, one made on this platform to the last bit; the machine's own measurements
    (times, memory) are never compared, and NaN equals NaN."""
    from benchmarks.results.verify import compare, same_platform

    claimed = {"final/test_loss": 0.5, "final/test_accuracy": "nan", "final/train_time_s": 9.0,
               "final/peak_gpu_mib": 100.0, "val/loss": 3.0}
    here = {"final/test_loss": 0.5 * (1 + 0.005), "final/test_accuracy": float("nan"),
            "final/train_time_s": 1.0, "final/peak_gpu_mib": 1.0}
    assert compare(claimed, here, exact=False, rtol=0.01) == ("within 0.01 (relative)", {})
    outcome, differ = compare(claimed, here, exact=True, rtol=0.01)
    assert outcome == "MISMATCH" and set(differ) == {"final/test_loss"}
    here["final/test_loss"] = 0.5 * 1.02  # 2% off: beyond the tolerance
    outcome, differ = compare(claimed, here, exact=False, rtol=0.01)
    assert outcome == "MISMATCH" and differ == {"final/test_loss": (0.5, 0.51)}
    here["final/test_loss"] = 0.5
    assert compare(claimed, here, exact=True, rtol=0.01) == ("identical", {})
    run = {"tags": {"mesabench.machine": "x86_64, 2 CPU cores", "mesabench.torch_version": "2.1"}}
    assert same_platform(run, "x86_64, 2 CPU cores", "2.1")
    assert not same_platform(run, "x86_64, 2 CPU cores", "2.2")
    assert not same_platform(run, "arm64, 8 CPU cores", "2.1")
