"""Data loader: search path order, checksums, and messages that say what to put where."""

from pathlib import Path

import pytest

from suite.core import data


def test_shared_data_is_found_and_verified() -> None:
    if not (data.REPO_ROOT.parent / "shared" / "data" / "block_vs.csv").exists():
        pytest.skip("../shared/data is not beside this checkout")
    assert data.locate("block_vs.csv").name == "block_vs.csv"
    assert data.unavailable_reason("block_vs.csv", "fa_exchange_rates.npy") is None


def test_environment_folder_comes_first_and_checksums_are_enforced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "block_vs.csv").write_text("not the real file\n")
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    assert data.search_path()[0] == tmp_path
    with pytest.raises(data.DataUnavailable, match="does not match the expected SHA-256"):
        data.locate("block_vs.csv")


def test_missing_file_message_says_what_and_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(data, "REPO_ROOT", tmp_path / "nowhere" / "repo")
    reason = data.unavailable_reason("fa_exchange_rates.npy")
    assert "'fa_exchange_rates.npy' not found" in reason and str(tmp_path) in reason
    assert "TDBENCH_DATA" in reason and "exchange rates" in reason


def test_unknown_file_names_list_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"known: block_vs\.csv"):
        data.locate("nope.csv")
