"""Records: stable keys, atomic writes, clean-up of killed writes."""

import json

from suite import records as rec


def key(seed: int = 0, **config: object) -> rec.RunKey:
    return rec.RunKey("sas", "rjmcmc-baseline", seed, {"profile": "quick", **config})


def test_config_hash_is_stable_and_sensitive() -> None:
    assert key().config_hash == key().config_hash
    assert key().config_hash != key(profile="paper").config_hash
    assert key(0).filename != key(1).filename


def test_write_is_atomic_and_leaves_no_temporaries(tmp_path) -> None:
    path = rec.write_record(tmp_path, key(), {"status": "ok", "value": 1.5})
    assert rec.is_finished(tmp_path, key())
    assert json.loads(path.read_text())["value"] == 1.5
    assert [p.name for p in rec.records_dir(tmp_path).iterdir()] == [key().filename]
    assert rec.load_records(tmp_path)[0]["schema"] == rec.SCHEMA_VERSION


def test_stale_temporaries_are_removed_and_never_loaded(tmp_path) -> None:
    rec.write_record(tmp_path, key(), {"status": "ok"})
    stale = rec.records_dir(tmp_path) / f".{key(1).filename}.abc.tmp"
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
