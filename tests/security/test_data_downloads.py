"""Downloads of data files from a mirror (issue 51): a size cap, a deadline, a per-read timeout, nothing kept after a
failure or Ctrl-C, sizes compared before hashing, and no download while problems are listed or a grid is planned.

Threat: ``TDBENCH_DATA_URL`` naming a hostile or broken mirror. Before, an endless body wrote 173 MB in 90 s for a
9 KB file, a trickling server never ended, Ctrl-C in ``tdbench data fetch`` printed a traceback, a 16 GB sparse file
named ``block_vs.csv`` was hashed for 53 s by ``tdbench data list``, and ``tdbench list`` waited 100 s on a hanging
mirror. Each test serves the mirror from a local HTTP server whose handlers stop on their own after a few seconds,
so that the old code fails the test rather than hanging it.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pooch
import pytest

from suite.cli import data_command
from suite.data import download, locate
from suite.data.catalog import KNOWN_FILES, DataFile
from tests.local_mirror import local_mirror

TINY = b"a,b\n1,2\n3,4\n"
OTHER = b"x\n" * 500
#: Seconds a hostile handler keeps going before it gives up on its own (the old code's downloads then end).
GIVE_UP_S = 4.0
#: Bytes an endless handler sends at most before it gives up.
ENDLESS_LIMIT = 8 << 20

Behaviour = Callable[[http.server.BaseHTTPRequestHandler], None]


# ------------------------------------------------------------------ a mirror with hostile answers
class Mirror:
    """A local HTTP server: a behaviour per path (default 404), and every GET path recorded."""

    def __init__(self) -> None:
        self.routes: dict[str, Behaviour] = {}
        self.requests: list[str] = []
        self.base = ""

    def answer(self, name: str, behaviour: Behaviour) -> None:
        """Answer ``GET /mirror/NAME`` with ``behaviour(handler)``."""
        self.routes[f"/mirror/{name}"] = behaviour


def _handler(mirror: Mirror) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            mirror.requests.append(self.path)
            try:
                mirror.routes.get(self.path, _not_found)(self)
            except OSError:  # the client hung up: what a refused download does
                pass

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def _not_found(handler: http.server.BaseHTTPRequestHandler) -> None:
    handler.send_error(404)


def _serve(body: bytes) -> Behaviour:
    def behaviour(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return behaviour


def _endless(handler: http.server.BaseHTTPRequestHandler) -> None:
    """No length announced, then bytes until the client hangs up (or ENDLESS_LIMIT, for the old code)."""
    handler.send_response(200)
    handler.end_headers()
    block = b"y" * 65536
    for _ in range(ENDLESS_LIMIT // len(block)):
        handler.wfile.write(block)


def _announces(length: int) -> Behaviour:
    def behaviour(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(length))
        handler.end_headers()
        handler.wfile.write(OTHER)

    return behaviour


def _trickle(body: bytes, every_s: float, then: Callable[[], None] | None = None, after: int = 0) -> Behaviour:
    """The length of ``body`` announced, ``after`` bytes at once, ``then()``, the rest a byte every ``every_s``."""

    def behaviour(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:after])
        handler.wfile.flush()
        if then is not None:
            then()
        stop = time.monotonic() + GIVE_UP_S
        for byte in body[after:]:
            if time.monotonic() > stop:
                return
            time.sleep(every_s)
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()

    return behaviour


def _silent(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Accepts the request and says nothing for GIVE_UP_S seconds."""
    time.sleep(GIVE_UP_S)


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mirror]:
    """A local mirror that ``TDBENCH_DATA_URL`` points at, with no data file anywhere else and downloads on."""
    state = Mirror()
    monkeypatch.setenv(locate.ENV_VAR, str(tmp_path / "nothing-here"))
    monkeypatch.setenv(locate.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.delenv(locate.OFFLINE_VAR, raising=False)
    monkeypatch.setattr(locate, "REPO_ROOT", tmp_path / "repo")  # no ../shared/data
    monkeypatch.setattr(locate, "_FAILED", {})
    with local_mirror(_handler(state), monkeypatch) as state.base:
        yield state


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """Two tiny files, with their sizes, replace the registry: name -> bytes."""
    files = {"tiny.csv": TINY, "other.txt": OTHER}
    for name in list(KNOWN_FILES):
        monkeypatch.delitem(KNOWN_FILES, name)
    for name, body in files.items():
        sha = hashlib.sha256(body).hexdigest()
        monkeypatch.setitem(KNOWN_FILES, name, DataFile(name, sha, f"test file {name}", len(body), "https://x.invalid"))
    return files


def _cache(tmp_path: Path) -> list[str]:
    folder = tmp_path / "cache"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _refused(name: str) -> str:
    with pytest.raises(locate.DataUnavailable) as failed:
        locate.locate(name)
    return str(failed.value)


# ------------------------------------------------------------------ H8: size cap, deadline, per-read timeout
def test_an_endless_body_is_stopped_past_the_files_size_and_nothing_is_kept(
    tmp_path: Path, mirror: Mirror, registry: dict[str, bytes]
) -> None:
    mirror.answer("other.txt", _endless)
    message = _refused("other.txt")
    assert "sent more than" in message and f"the file has {len(OTHER)} bytes" in message, message
    assert f"sent more than {len(OTHER) + download.SIZE_SLACK} bytes" in message
    assert f"{mirror.base}/other.txt" in message and "tdbench data fetch other.txt" in message
    assert _cache(tmp_path) == [], "the refused download left a file in the cache"


def test_a_body_announced_larger_than_the_file_is_refused_before_it_is_read(
    tmp_path: Path, mirror: Mirror, registry: dict[str, bytes]
) -> None:
    mirror.answer("other.txt", _announces(10**12))
    message = _refused("other.txt")
    assert f"announces {10**12} bytes" in message and "refused, nothing was kept" in message
    assert _cache(tmp_path) == []


def test_a_trickling_server_is_stopped_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mirror: Mirror, registry: dict[str, bytes]
) -> None:
    monkeypatch.setattr(download, "DEADLINE_S", 0.5, raising=False)
    mirror.answer("other.txt", _trickle(OTHER, every_s=0.05))  # 1000 bytes: 50 s, each read well within its timeout
    started = time.monotonic()
    message = _refused("other.txt")
    assert "did not finish within 0.5 s" in message and "DEADLINE_S" in message, message
    assert time.monotonic() - started < GIVE_UP_S - 1, "stopped by the server giving up, not by the deadline"
    assert _cache(tmp_path) == []


def test_a_silent_server_fails_after_the_per_read_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mirror: Mirror, registry: dict[str, bytes]
) -> None:
    monkeypatch.setattr(download, "READ_TIMEOUT_S", 0.3, raising=False)
    mirror.answer("tiny.csv", _silent)
    message = _refused("tiny.csv")
    assert "timed out" in message and f"{mirror.base}/tiny.csv" in message, message
    assert _cache(tmp_path) == []


def test_the_deadline_size_cap_and_read_timeout_are_documented_constants() -> None:
    assert 0 < download.SIZE_SLACK <= 1 << 20 and download.READ_TIMEOUT_S < download.DEADLINE_S
    text = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text()
    assert f"{download.DEADLINE_S:g} s" in text and f"{download.READ_TIMEOUT_S:g} s" in text
    assert "not downloaded yet" in text


# ------------------------------------------------------------------ H8 and H9: Ctrl-C (or SIGTERM) during a download
class SigtermReachedTheTest(Exception):
    """SIGTERM that ``tdbench data fetch`` left to its default action (which ends the process, temporary file kept)."""


def _sigterm_reached_the_test(signum: int, frame: object) -> None:
    raise SigtermReachedTheTest


@pytest.fixture
def signals_raise() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this (main) thread, whatever the parent set; SIGTERM raises instead of
    ending the test run when the code under test does not handle it."""
    if threading.current_thread() is not threading.main_thread() or sys.platform == "win32":
        pytest.skip("POSIX signals, which reach only the main thread")
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, _sigterm_reached_the_test),
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _signalled_after(signum: int, after: int) -> Behaviour:
    """``after`` bytes of OTHER, then ``signum`` to this process (Ctrl-C, ``timeout``), then a slow trickle."""
    return _trickle(OTHER, every_s=0.02, then=lambda: os.kill(os.getpid(), signum), after=after)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_during_data_fetch_prints_one_line_and_keeps_nothing(
    tmp_path: Path,
    mirror: Mirror,
    registry: dict[str, bytes],
    signals_raise: None,
    capsys: pytest.CaptureFixture[str],
    signum: signal.Signals,
    status: int,
) -> None:
    mirror.answer("tiny.csv", _serve(TINY))
    mirror.answer("other.txt", _signalled_after(signum, after=100))
    try:
        code = data_command.main(["fetch", "tiny.csv", "other.txt"], prog="tdbench data")
    except (KeyboardInterrupt, SigtermReachedTheTest) as exc:
        pytest.fail(f"{signum.name} left tdbench data fetch as {type(exc).__name__}: a traceback, or the process ended")
    assert code == status
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"tdbench data fetch: interrupted by {signum.name} while downloading 'other.txt'; nothing of it was kept"
    ]
    assert "Traceback" not in captured.out + captured.err
    assert _cache(tmp_path) == ["tiny.csv"], "the file finished before the signal is kept, the interrupted one is not"
    assert signal.getsignal(signal.SIGTERM) is _sigterm_reached_the_test, "the command left its SIGTERM handler"


# ------------------------------------------------------------------ H11: sizes compared before hashing
def test_a_large_sparse_file_of_another_size_is_refused_without_reading_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mirror: Mirror,
    registry: dict[str, bytes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    huge = 2 << 30
    (tmp_path / "cache").mkdir()
    with open(tmp_path / "cache" / "tiny.csv", "wb") as handle:
        handle.truncate(huge)  # 2 GiB, sparse: no block written
    real_sha, real_check = locate.sha256_of, pooch.core.hash_matches

    def small_only(path: os.PathLike[str] | str) -> None:
        assert os.path.getsize(path) < 1 << 20, f"{path} was hashed in full"

    monkeypatch.setattr(locate, "sha256_of", lambda path: small_only(path) or real_sha(path))
    monkeypatch.setattr(pooch.core, "hash_matches", lambda path, *a, **k: small_only(path) or real_check(path, *a, **k))

    assert data_command.main(["list"], prog="tdbench data") == 0
    tiny = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny.csv"))
    assert "corrupt" in tiny
    message = _refused("tiny.csv")
    assert f"it has {huge} bytes, the original {len(TINY)}" in message
    assert "'tdbench data fetch tiny.csv' replaces it" in message and mirror.requests == []

    mirror.answer("tiny.csv", _serve(TINY))
    assert data_command.main(["fetch", "tiny.csv"], prog="tdbench data") == 0
    assert (tmp_path / "cache" / "tiny.csv").read_bytes() == TINY


# ------------------------------------------------------------------ listing and planning do not download
#: The problems that read data files, and one that reads none.
DATA_PROBLEMS = ("block-vs", "factor-analysis", "factor-analysis-k23", "dag-mlp-sachs", "sas")


def test_tdbench_list_describe_and_a_dry_run_make_no_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mirror: Mirror, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.cli import main, run_command  # the command line imports every layer: only this test needs it

    every = run_command.available_problems()
    monkeypatch.setattr(run_command, "available_problems", lambda: {n: every[n] for n in DATA_PROBLEMS})
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert mirror.requests == [], "tdbench list downloaded"
    for name in ("block_vs.csv", "fa_exchange_rates.npy", "sachs_cyto_full_data.csv"):
        assert f"data file '{name}' is not downloaded yet" in listed
    assert "tdbench data fetch block_vs.csv" in listed

    grid = ["--problems", ",".join(DATA_PROBLEMS), "--methods", "rjmcmc-baseline", "--profile", "smoke"]
    assert main(["run", "--dry-run", *grid, "--seeds", "1", "--out", str(tmp_path / "out")]) == 0
    planned = capsys.readouterr()
    assert mirror.requests == [], "tdbench run --dry-run downloaded"
    assert "problem block-vs is unavailable: data file 'block_vs.csv' is not downloaded yet" in planned.err
    assert [json.loads(line)["problem"] for line in planned.out.splitlines()] == ["sas"]

    assert main(["describe", "block-vs"]) == 0  # describing a problem reads its class, downloads nothing
    assert "block-vs" in capsys.readouterr().out
    assert mirror.requests == [], "tdbench describe downloaded"


def test_downloads_are_deferred_only_within_the_block(
    tmp_path: Path, mirror: Mirror, registry: dict[str, bytes]
) -> None:
    mirror.answer("tiny.csv", _serve(TINY))
    with locate.downloads_deferred():
        reason = locate.unavailable_reason("tiny.csv")
    assert "'tiny.csv' is not downloaded yet" in reason and "tdbench data fetch tiny.csv" in reason
    assert mirror.requests == [] and _cache(tmp_path) == []
    assert locate.unavailable_reason("tiny.csv") is None  # a run downloads on first use, as before
    assert mirror.requests == ["/mirror/tiny.csv"] and _cache(tmp_path) == ["tiny.csv"]
