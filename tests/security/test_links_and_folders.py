"""Links and folders (issue 51, round two): a linked ``records/`` or ``draws/`` is refused, ``--checkpoint-dir``
has ``--out``'s checks and a dry run writes nothing, a FIFO named like a reference blocks no run, and a read-only
results folder is an error message, not a traceback.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from suite import cli
from suite.core.registry import make_problem
from suite.store import references
from tests.security.test_records import _record, _write

needs_fifos = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links on this platform")
RUN = ["run", "--problems", "sas", "--methods", "rjmcmc-naive", "--profile", "smoke", "--seeds", "1", "--no-progress"]


@needs_symlinks
@pytest.mark.parametrize("folder", ["records", "draws", "checkpoints"])
def test_a_linked_own_folder_is_refused_before_any_work(
    tmp_path: Path, folder: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """H2: a ``records/`` or ``draws/`` that is a link was followed: a rerun wrote outside ``--out``."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / folder).symlink_to(elsewhere, target_is_directory=True)
    assert cli.main([*RUN, "--out", str(out)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("folder", ["/dev/shm/../null-folder", "/proc/self/ckpt", "/usr/lib/ckpt"])
def test_checkpoint_dir_is_refused_where_out_would_be(
    tmp_path: Path, folder: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """H3: ``--checkpoint-dir`` skipped the checks that ``--out`` has (``/dev/...``, system folders)."""
    with pytest.raises(SystemExit) as stop:
        cli.main([*RUN, "--out", str(tmp_path / "out"), "--checkpoint-dir", folder])
    assert stop.value.code == 2
    assert "checkpoint folder" in capsys.readouterr().err


def test_checkpoint_dir_inside_the_repository_s_code_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / "suite").is_dir():
        pytest.skip("not a source checkout")
    with pytest.raises(SystemExit) as stop:
        cli.main([*RUN, "--dry-run", "--out", str(repo / "results" / "x"), "--checkpoint-dir", str(repo / "suite")])
    assert stop.value.code == 2
    assert "inside the repository" in capsys.readouterr().err


def test_a_dry_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """H3: even ``--dry-run`` created ``OUT/records`` and ``DIR/records`` under ``--checkpoint-dir``."""
    out, checkpoints = tmp_path / "out", tmp_path / "ckpt"
    assert cli.main([*RUN, "--dry-run", "--out", str(out), "--checkpoint-dir", str(checkpoints)]) == 0
    assert "sas" in capsys.readouterr().out
    assert not out.exists() and not checkpoints.exists()


def test_a_dry_run_still_refuses_a_folder_it_could_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert cli.main([*RUN, "--dry-run", "--out", str(blocker / "out")]) == 2
    assert "not writable" in capsys.readouterr().err


@needs_fifos
def test_a_fifo_named_like_a_reference_blocks_no_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """H10: a FIFO named like a reference (``.npz``/``.json``) in ``TDBENCH_REFERENCES`` hung ``tdbench run``."""
    monkeypatch.setenv(references.ENV_VAR, str(tmp_path))
    problem = make_problem("robust-vs")
    stem = references.file_stem(references.reference_key(problem), references.wanted_size(problem))
    (tmp_path / problem.name).mkdir()
    for suffix in (".npz", ".json"):
        os.mkfifo(tmp_path / problem.name / f"{stem}{suffix}")
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            references.load(problem)
            outcome.append(None)
        except Exception as exc:
            outcome.append(exc)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading the reference blocked on a FIFO"
    assert isinstance(outcome[0], references.InvalidReferenceError)
    assert "not a regular file" in str(outcome[0])


def test_a_report_into_a_read_only_folder_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """H12: ``tdbench report`` on a read-only results folder gave an EROFS traceback (only ENOSPC was handled).

    Root may write anywhere, so the read-only file system is simulated where every report file is written.
    """
    _write(tmp_path, _record(seed=0))

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "leaderboard_toy.csv"))

    monkeypatch.setattr("suite.core.files.make_temporary", read_only)
    monkeypatch.setattr("suite.core.files.write_temporary", read_only)
    assert cli.main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "read-only file system" in err and "Traceback" not in err
