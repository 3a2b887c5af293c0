"""Which reference file a run was scored against (issue 36, part 7): its search folder, its path there and checksums.

Before: a record scored against a reference from ``TDBENCH_REFERENCES`` said only the file's base name (the key),
not which folder of the variable it came from, nor a checksum: two folders holding different files of one key
gave records that could not be told apart.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from suite.core.context import RunContext
from suite.core.method import Method, Result
from suite.core.registry import make_problem
from suite.run.runner import execute
from suite.store import references as store

PROBLEM = "robust-vs"


class Fails(Method):
    """Fails at once: the record still says what the run would have been scored against."""

    name = "fails"

    def run(self, problem, context):
        return Result.failed("on purpose")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shipped(problem) -> Path:
    path = store.find_exact(problem, None)
    if path is None or store.SHIPPED_DIR not in path.parents:
        pytest.skip(f"no shipped reference for {PROBLEM}")
    return path


def test_a_record_names_the_reference_folder_path_and_checksums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of the shipped reference in the second folder of TDBENCH_REFERENCES wins over the shipped one."""
    monkeypatch.delenv(store.ENV_VAR, raising=False)
    shipped = _shipped(make_problem(PROBLEM))
    empty, local = tmp_path / "empty", tmp_path / "local"
    empty.mkdir()
    copy = local / PROBLEM / shipped.name
    copy.parent.mkdir(parents=True)
    shutil.copyfile(shipped, copy)
    shutil.copyfile(shipped.with_suffix(".json"), copy.with_suffix(".json"))
    monkeypatch.setenv(store.ENV_VAR, os.pathsep.join([str(empty), str(local)]))

    record = execute(make_problem(PROBLEM), Fails(), RunContext(seed=0))
    reference = record["reference"]
    assert reference["kind"] == "estimated" and reference["file"] == shipped.name
    assert reference["search_folder"] == store.ENV_VAR
    assert reference["search_folder_entry"] == 1 and reference["search_folder_path"] == str(local)
    assert reference["path"] == f"{PROBLEM}/{shipped.name}"
    assert reference["sha256"] == _sha256(copy)
    assert reference["json_sha256"] == _sha256(copy.with_suffix(".json"))
    assert len(reference["arrays_sha256"]) == 64


def test_a_record_scored_against_the_shipped_reference_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(store.ENV_VAR, raising=False)
    problem = make_problem(PROBLEM)
    shipped = _shipped(problem)
    reference = store.describe(problem)
    assert reference["search_folder"] == "shipped" and "search_folder_path" not in reference
    assert reference["path"] == shipped.relative_to(store.SHIPPED_DIR).as_posix()
    assert reference["sha256"] == _sha256(shipped)


def test_the_checksum_is_of_the_file_the_run_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record describes the reference the problem loaded (and scored with), even if the folders change after."""
    monkeypatch.delenv(store.ENV_VAR, raising=False)
    problem = make_problem(PROBLEM)
    shipped = _shipped(problem)
    used = problem.stored_reference()
    copy = tmp_path / PROBLEM / shipped.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(shipped.read_bytes() + b"\0")  # another file of the same key, found first from now on
    shutil.copyfile(shipped.with_suffix(".json"), copy.with_suffix(".json"))
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    reference = store.describe(problem)
    assert problem.stored_reference() is used
    assert reference["search_folder"] == "shipped" and reference["sha256"] == _sha256(shipped)
