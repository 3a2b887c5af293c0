"""Records: stable keys, atomic writes, clean-up of killed writes."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.core.files import CHECKPOINTS_DIR
from suite.results import records as rec


def key(seed: int = 0, **config: object) -> rec.RunKey:
    return rec.RunKey("sas", "rjmcmc-baseline", seed, {"profile": "quick", **config})


def record(seed: int = 0, **extra: object) -> dict[str, object]:
    """A minimal valid record of ``key(seed)``."""
    return {"problem": "sas", "method": "rjmcmc-baseline", "seed": seed, "status": "ok", "metrics": {}, **extra}


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_config_hash_is_stable_and_sensitive() -> None:
    assert key().config_hash == key().config_hash
    assert key().config_hash != key(profile="paper").config_hash
    assert key(0).filename != key(1).filename


def test_write_is_atomic_and_leaves_no_temporaries(tmp_path) -> None:
    path = rec.write_record(tmp_path, key(), record(value=1.5))
    assert rec.is_finished(tmp_path, key())
    assert json.loads(path.read_text())["value"] == 1.5
    assert [p.name for p in rec.records_dir(tmp_path).iterdir()] == [key().filename]
    assert rec.load_records(tmp_path)[0]["schema"] == rec.SCHEMA_VERSION


def test_stale_temporaries_are_removed_and_never_loaded(tmp_path) -> None:
    rec.write_record(tmp_path, key(), record())
    stale = rec.records_dir(tmp_path) / f".{key(1).filename}.{_dead_pid()}.abc.tmp"
    stale.write_text("{half a rec")
    assert len(rec.load_records(tmp_path)) == 1
    assert rec.remove_stale_temporaries(tmp_path) == 1 and not stale.exists()


def test_unwritable_folder_is_reported(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    try:
        rec.check_writable(blocker / "sub")
    except ValueError as exc:
        assert "not writable" in str(exc)
    else:
        raise AssertionError("expected ValueError")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"problem": "sas", "method": "rjmcmc-baseline", "seed": 0, "sta', "unreadable record"),  # half written
        ("", "unreadable record"),  # created, never written
        (b"\xff\xfe{}", "unreadable record"),  # not text
        ("[1, 2]", "a JSON list, not an object"),
        ('{"problem": "sas", "method": "rjmcmc-baseline", "seed": 0, "status": "ok"}', "missing metrics"),
        (
            '{"problem": "sas", "method": "rjmcmc-baseline", "seed": "0", "status": "ok", "metrics": {}}',
            "seed is a str",
        ),
        ('{"problem": "sas", "method": "fr", "seed": 0, "status": "ok", "metrics": {}}', "holds sas / fr / seed 0"),
    ],
)
def test_an_unusable_record_is_named_and_treated_as_absent(tmp_path: Path, content: str | bytes, why: str) -> None:
    """is_finished says no (so the run is redone), load_records skips it and read_record never raises."""
    rec.write_record(tmp_path, key(1), record(1))
    path = rec.record_path(tmp_path, key())
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert why in rec.record_problem(path, key()) and str(path) in rec.record_problem(path, key())
    with pytest.warns(UserWarning, match="treating it as absent") as caught:
        assert not rec.is_finished(tmp_path, key())
    assert str(path) in str(caught[0].message)
    with pytest.warns(UserWarning, match=why):
        assert [r["seed"] for r in rec.load_records(tmp_path)] == [1]
    with pytest.warns(UserWarning, match=why):
        stand_in = rec.read_record(tmp_path, key())
    assert stand_in["status"] == "failed" and str(path) in stand_in["reason"] and stand_in["seed"] == 0
    assert rec.is_finished(tmp_path, key(1)) and rec.read_record(tmp_path, key(1))["status"] == "ok"
    rec.write_record(tmp_path, key(), record())  # the rerun replaces it
    assert rec.is_finished(tmp_path, key()) and len(rec.load_records(tmp_path)) == 2


def test_temporaries_name_their_writer_and_only_dead_writers_lose_them(tmp_path: Path) -> None:
    """A live process's temporary (record or checkpoint) survives clean-up; a dead or old nameless one goes."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        folders = [rec.records_dir(tmp_path), tmp_path / CHECKPOINTS_DIR]
        made: dict[str, Path] = {}
        for folder in folders:
            folder.mkdir(parents=True)
            for who, pid in (("live", live.pid), ("dead", _dead_pid()), ("self", os.getpid())):
                made[f"{folder.name}-{who}"] = folder / f".x.json.{pid}.k2j4_8ab.tmp"
            made[f"{folder.name}-old"] = folder / ".x.json.k2j4_8ab.tmp"  # an older version's name: no process id
            made[f"{folder.name}-new"] = folder / ".y.json.a1b2c3d4.tmp"
        for path in made.values():
            path.write_text("partial")
        for folder in folders:
            old = time.time() - 2 * rec.LEGACY_TEMPORARY_AGE_S
            os.utime(folder / ".x.json.k2j4_8ab.tmp", (old, old))
        assert rec.temporary_writer(made["records-live"]) == live.pid
        assert rec.temporary_writer(made["records-old"]) is None
        assert rec.remove_stale_temporaries(tmp_path) == 4
        gone = {name for name, path in made.items() if not path.exists()}
        assert gone == {"records-dead", "records-old", "checkpoints-dead", "checkpoints-old"}
    finally:
        live.kill()
        live.wait()
    assert rec.remove_stale_temporaries(tmp_path) == 2  # now the killed process's are stale too
    assert made["records-self"].exists() and made["records-new"].exists()


def test_written_temporaries_carry_this_process_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def interrupted_replace(src: str, dst: object) -> None:
        seen.append(src)
        raise KeyboardInterrupt

    monkeypatch.setattr(rec.os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        rec.write_record(tmp_path, key(), record())
    assert rec.temporary_writer(Path(seen[0])) == os.getpid() and not Path(seen[0]).exists()


@pytest.mark.slow
def test_a_corrupt_record_is_redone_and_never_stops_a_later_run(
    tmp_path: Path, capsys: pytest.CaptureFixture, recwarn: pytest.WarningsRecorder
) -> None:
    """A half-written record (of this method or another) is named in a warning; its run is redone, others kept."""
    from suite.cli import main

    common = ["--problems", "sas", "--profile", "smoke", "--out", str(tmp_path), "--no-progress", "--eval-draws", "300"]
    assert main([*common, "--methods", "rjmcmc-naive", "--seeds", "2"]) == 0
    first, second = sorted(rec.records_dir(tmp_path).glob("*.json"))
    kept = second.read_text()
    first.write_text(first.read_text()[:40])  # a write cut short (e.g. a disk that filled up)
    capsys.readouterr()
    assert main([*common, "--methods", "rjmcmc-baseline", "--seeds", "1"]) == 0  # another method: no crash
    assert any(str(first) in str(w.message) for w in recwarn.list)
    assert main([*common, "--methods", "rjmcmc-naive", "--seeds", "2"]) == 0
    assert "1 of 2 runs already have records" in capsys.readouterr().out
    assert rec.record_problem(first) is None and second.read_text() == kept


def test_every_record_comes_from_one_constructor_that_checks_the_status() -> None:
    key = rec.RunKey("sas", "mf", 3, {"profile": "smoke"})
    lost = rec.lost_record(key, rec.FAILED, "worker died")
    assert lost == {
        "problem": "sas",
        "method": "mf",
        "seed": 3,
        "status": "failed",
        "reason": "worker died",
        "config": {"profile": "smoke"},
        rec.LOST: True,
    }
    row = rec.make_record("sas", "dagma", None, rec.NOT_APPLICABLE, "needs DAGs", metrics={})
    assert (row["status"], row["seed"], row["metrics"]) == ("not_applicable", None, {})
    with pytest.raises(ValueError, match="unknown record status 'done'; valid: ok, failed, not_applicable"):
        rec.make_record("sas", "mf", 0, "done")


def test_a_rewritten_record_is_replaced_atomically_and_reads_back(tmp_path: Path) -> None:
    key = rec.RunKey("sas", "mf", 0, {"profile": "smoke"})
    record = rec.make_record("sas", "mf", 0, rec.OK, None, metrics={})
    path = rec.write_record(tmp_path, key, record)
    rec.rewrite_record(path, {**rec.read_record(tmp_path, key), "problem_facts": {"num_models": 4}})
    assert rec.read_record(tmp_path, key)["problem_facts"] == {"num_models": 4}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
