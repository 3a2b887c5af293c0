"""Data loader: search order, checksums, downloads from a local HTTP server, and ``tdbench data list/fetch``."""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pooch
import pytest

from suite.cli import data_command
from suite.data import download, locate
from suite.data.catalog import KNOWN_FILES, DataFile
from tests.local_mirror import local_mirror

SHARED = locate.REPO_ROOT.parent / "shared" / "data"
TINY = b"a,b\n1,2\n3,4\n"
OTHER = b"x\n" * 500


# ------------------------------------------------------------------ a local server and a registry of two tiny files
class Server:
    """Files served on 127.0.0.1 by path: (status, body, declared length or None); every GET path is recorded."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes, int | None]] = {}
        self.requests: list[str] = []
        self.base = ""

    def serve(self, name: str, body: bytes, status: int = 200, length: int | None = None) -> None:
        """Serve ``body`` at ``/NAME`` with ``status``, announcing ``length`` bytes (default: the body's)."""
        self.routes[f"/{name}"] = (status, body, length)


def _handler(server: Server) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server.requests.append(self.path)
            status, body, length = server.routes.get(self.path, (404, b"not found", None))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)  # a length above the body's makes a truncated download: HTTP/1.0 then closes

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A local HTTP server that ``TDBENCH_DATA_URL`` points at."""
    state = Server()
    with local_mirror(_handler(state), monkeypatch) as state.base:
        yield state


def _sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """Two tiny files replace the registry; no shared folder, an empty cache, downloads on: name -> bytes."""
    files = {"tiny.csv": TINY, "other.txt": OTHER}
    for name in list(KNOWN_FILES):
        monkeypatch.delitem(KNOWN_FILES, name)
    for name, body in files.items():
        spec = DataFile(name, _sha(body), f"test file {name}", len(body), f"https://example.invalid/{name}")
        monkeypatch.setitem(KNOWN_FILES, name, spec)
    monkeypatch.setattr(locate, "REPO_ROOT", tmp_path / "repo")
    monkeypatch.setattr(locate, "_FAILED", {})
    monkeypatch.setenv(locate.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.delenv(locate.ENV_VAR, raising=False)
    monkeypatch.delenv(locate.OFFLINE_VAR, raising=False)
    return files


def _served(server: Server, registry: dict[str, bytes]) -> None:
    for name, body in registry.items():
        server.serve(f"mirror/{name}", body)


def _cache(tmp_path: Path) -> list[str]:
    folder = tmp_path / "cache"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ------------------------------------------------------------------ the real registry
def test_shared_data_is_found_and_verified() -> None:
    if not (SHARED / "block_vs.csv").exists():
        pytest.skip("../shared/data is not beside this checkout")
    assert locate.locate("block_vs.csv").name == "block_vs.csv"
    assert locate.unavailable_reason("block_vs.csv", "fa_exchange_rates.npy") is None


def test_every_registry_entry_is_pinned_and_credited() -> None:
    pinned = re.compile(r"^https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+$")
    assert set(KNOWN_FILES) == {
        "block_vs.csv",
        "fa_exchange_rates.npy",
        "sachs_cyto_full_data.csv",
        "sachs_target_edges.csv",
        "coal.csv",
        "galaxies.csv",
        "Galaxy.R",
        "Enzyme.R",
        "Acidity.R",
        "lynx.csv",
        "UScrime.csv",
        "radiata_pine.dat",
    }
    for name, spec in KNOWN_FILES.items():
        assert spec.name == name and re.fullmatch(r"[0-9a-f]{64}", spec.sha256) and spec.size > 0
        assert pinned.match(spec.url), spec.url
        assert ("MIT" in spec.licence or "GPL" in spec.licence) and spec.citation and spec.origin
        if (SHARED / name).is_file():
            assert (SHARED / name).stat().st_size == spec.size


def test_the_real_files_download_from_a_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: Server) -> None:
    if not all((SHARED / name).is_file() for name in KNOWN_FILES):
        pytest.skip("../shared/data is not beside this checkout")
    for name in KNOWN_FILES:
        server.serve(f"mirror/{name}", (SHARED / name).read_bytes())
    monkeypatch.setattr(locate, "REPO_ROOT", tmp_path / "fresh-clone")
    monkeypatch.setattr(locate, "_FAILED", {})
    monkeypatch.setenv(locate.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.delenv(locate.ENV_VAR, raising=False)
    monkeypatch.delenv(locate.OFFLINE_VAR)
    assert locate.unavailable_reason(*KNOWN_FILES) is None
    assert _cache(tmp_path) == sorted(KNOWN_FILES)


def test_offline_by_default_in_the_tests() -> None:
    assert locate.offline(), "tests/conftest.py sets TDBENCH_OFFLINE so that no test downloads"


# ------------------------------------------------------------------ lookup order, checksums, messages
def test_environment_folder_comes_first_and_checksums_are_enforced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "block_vs.csv").write_text("not the real file\n")
    monkeypatch.setenv(locate.ENV_VAR, str(tmp_path))
    assert locate.search_path()[0] == tmp_path
    with pytest.raises(locate.DataUnavailable, match="does not match the expected SHA-256"):
        locate.locate("block_vs.csv")


def test_missing_file_message_says_what_and_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(locate.ENV_VAR, str(tmp_path))
    monkeypatch.setenv(locate.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.setenv(locate.OFFLINE_VAR, "1")
    monkeypatch.setattr(locate, "REPO_ROOT", tmp_path / "nowhere" / "repo")
    reason = locate.unavailable_reason("fa_exchange_rates.npy")
    assert "'fa_exchange_rates.npy' not found" in reason and str(tmp_path) in reason
    assert "TDBENCH_DATA" in reason and "exchange rates" in reason
    assert "tdbench data fetch fa_exchange_rates.npy" in reason and "TDBENCH_OFFLINE is set" in reason


def test_unknown_file_names_list_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"known: .*block_vs\.csv"):
        locate.locate("nope.csv")


def test_search_order_is_data_folders_cache_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv(locate.ENV_VAR, os.pathsep.join([str(first), "", str(second)]))
    monkeypatch.setenv(locate.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.setattr(locate, "REPO_ROOT", tmp_path / "repo")
    assert locate.search_folders() == [
        ("TDBENCH_DATA", first),
        ("TDBENCH_DATA", second),
        ("cache", tmp_path / "cache"),
        ("shared", tmp_path / "shared" / "data"),
    ]


def test_the_cache_defaults_to_the_users_cache_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(locate.CACHE_VAR, raising=False)
    assert locate.cache_folder() == Path(pooch.os_cache("tdbench"))


def test_each_place_is_used_in_turn_then_the_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: Server, registry: dict[str, bytes]
) -> None:
    _served(server, registry)
    monkeypatch.setenv(locate.ENV_VAR, str(tmp_path / "mine"))
    places = {"TDBENCH_DATA": tmp_path / "mine", "cache": tmp_path / "cache", "shared": tmp_path / "shared" / "data"}
    for folder in places.values():
        folder.mkdir(parents=True)
        (folder / "tiny.csv").write_bytes(TINY)
    for label, folder in places.items():
        assert locate.find("tiny.csv") == (label, folder / "tiny.csv")
        assert locate.locate("tiny.csv") == folder / "tiny.csv"
        (folder / "tiny.csv").unlink()
    assert server.requests == []
    assert locate.find("tiny.csv") is None
    assert locate.locate("tiny.csv") == tmp_path / "cache" / "tiny.csv"
    assert server.requests == ["/mirror/tiny.csv"]


def test_the_registry_url_is_used_unless_a_mirror_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = KNOWN_FILES["block_vs.csv"]
    monkeypatch.delenv(locate.URL_VAR, raising=False)
    assert locate.source_url(spec) == spec.url
    monkeypatch.setenv(locate.URL_VAR, "http://mirror.example/tdbench/")
    assert locate.source_url(spec) == "http://mirror.example/tdbench/block_vs.csv"


# ------------------------------------------------------------------ downloads
def test_a_missing_file_is_downloaded_into_the_cache_once(
    tmp_path: Path, server: Server, registry: dict[str, bytes]
) -> None:
    _served(server, registry)
    path = locate.locate("tiny.csv")
    assert path == tmp_path / "cache" / "tiny.csv" and path.read_bytes() == TINY
    assert locate.unavailable_reason("tiny.csv", "other.txt") is None
    assert locate.locate("tiny.csv") == path
    assert sorted(server.requests) == ["/mirror/other.txt", "/mirror/tiny.csv"]
    assert _cache(tmp_path) == ["other.txt", "tiny.csv"]


def test_offline_nothing_is_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: Server, registry: dict[str, bytes]
) -> None:
    _served(server, registry)
    monkeypatch.setenv(locate.OFFLINE_VAR, "1")
    reason = locate.unavailable_reason("tiny.csv")
    assert "'tiny.csv' not found" in reason and "tdbench data fetch tiny.csv" in reason
    assert server.requests == [] and _cache(tmp_path) == []
    monkeypatch.setenv(locate.OFFLINE_VAR, "0")
    assert not locate.offline() and locate.unavailable_reason("tiny.csv") is None


def _broken(server: Server, how: str) -> None:
    if how == "wrong checksum":
        server.serve("mirror/tiny.csv", TINY.replace(b"1", b"9"))
    elif how == "truncated":
        server.serve("mirror/tiny.csv", TINY[:5], length=len(TINY))
    elif how == "short":
        server.serve("mirror/tiny.csv", TINY[:5])
    elif how == "server error":
        server.serve("mirror/tiny.csv", b"oops", status=500)
    # "missing": nothing served, a 404


@pytest.mark.parametrize("how", ["wrong checksum", "truncated", "short", "server error", "missing"])
def test_a_failed_download_names_file_and_url_and_leaves_nothing(
    tmp_path: Path, server: Server, registry: dict[str, bytes], how: str
) -> None:
    _broken(server, how)
    url = f"{server.base}/tiny.csv"
    with pytest.raises(locate.DataUnavailable) as failed:
        locate.locate("tiny.csv")
    message = str(failed.value)
    assert "'tiny.csv'" in message and url in message and "tdbench data fetch tiny.csv" in message
    expected = {"wrong checksum": "hash", "truncated": "cut short", "short": "hash", "server error": "500"}
    assert expected.get(how, "404") in message and ".." not in message
    assert _cache(tmp_path) == [], "a failed download left a file in the cache"
    assert locate.unavailable_reason("tiny.csv") == message  # the text problems report, without a second try
    assert server.requests == ["/mirror/tiny.csv"]
    _served(server, registry)
    assert locate.fetch("tiny.csv").read_bytes() == TINY  # an explicit fetch tries again
    assert locate.locate("tiny.csv") == tmp_path / "cache" / "tiny.csv" and _cache(tmp_path) == ["tiny.csv"]


def test_a_refused_connection_names_file_and_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: dict[str, bytes]
) -> None:
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(locate.URL_VAR, f"http://127.0.0.1:{port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    reason = locate.unavailable_reason("tiny.csv")
    assert "'tiny.csv'" in reason and f"http://127.0.0.1:{port}/tiny.csv" in reason
    assert _cache(tmp_path) == []


def test_a_corrupt_cached_copy_is_refused_then_replaced_by_fetch(
    tmp_path: Path, server: Server, registry: dict[str, bytes]
) -> None:
    _served(server, registry)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "tiny.csv").write_bytes(b"edited by hand\n")
    with pytest.raises(locate.DataUnavailable, match=r"'tdbench data fetch tiny\.csv' replaces it"):
        locate.locate("tiny.csv")
    assert server.requests == []
    assert locate.fetch("tiny.csv").read_bytes() == TINY
    assert _cache(tmp_path) == ["tiny.csv"]


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """tqdm is a dependency of the suite (pyproject.toml): the bar depends on the terminal only."""
    monkeypatch.setattr(download.sys.stderr, "isatty", lambda: True, raising=False)
    assert download.wants_progress_bar()
    monkeypatch.setattr(download.sys.stderr, "isatty", lambda: False, raising=False)
    assert not download.wants_progress_bar()


# ------------------------------------------------------------------ tdbench data list / fetch
def tdbench(arguments: list[str]) -> int:
    """``tdbench ARGS`` for ``data`` commands: the tool ``tdbench data`` dispatches to (checked below)."""
    assert arguments[0] == "data"
    return data_command.main(arguments[1:], prog="tdbench data")


def test_tdbench_data_is_the_data_command(capsys: pytest.CaptureFixture[str], registry: dict[str, bytes]) -> None:
    from suite.cli import TOOLS, main  # the command line imports every layer: only this test needs it

    assert TOOLS["data"][0] == "suite.cli.data_command"
    assert main(["data", "fetch", "nope.csv"]) == 2
    assert "tdbench data fetch: error: unknown data file 'nope.csv'" in capsys.readouterr().err


def test_data_list_shows_state_place_size_and_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], registry: dict[str, bytes]
) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "tiny.csv").write_bytes(TINY)
    assert tdbench(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "Search order: TDBENCH_DATA (unset), cache" in out
    tiny = next(line for line in out.splitlines() if line.startswith("tiny.csv"))
    assert "present" in tiny and f"cache: {tmp_path / 'cache' / 'tiny.csv'}" in tiny and f"{len(TINY)} B" in tiny
    other = next(line for line in out.splitlines() if line.startswith("other.txt"))
    assert "missing" in other and f"{len(OTHER)} B" in other
    assert "from https://example.invalid/other.txt" in out


def test_data_fetch_downloads_every_missing_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server: Server,
    registry: dict[str, bytes],
) -> None:
    _served(server, registry)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tiny.csv").write_bytes(TINY)
    monkeypatch.setenv(locate.ENV_VAR, str(mine))
    monkeypatch.setenv(locate.OFFLINE_VAR, "1")  # stops downloads on first use only, not an explicit fetch
    assert tdbench(["data", "fetch"]) == 0
    assert server.requests == ["/mirror/other.txt"] and _cache(tmp_path) == ["other.txt"]
    assert f"other.txt: downloaded to {tmp_path / 'cache' / 'other.txt'}" in capsys.readouterr().out
    assert tdbench(["data", "fetch"]) == 0
    assert "All 2 data files are present" in capsys.readouterr().out
    assert tdbench(["data", "fetch", "tiny.csv"]) == 0
    assert f"tiny.csv: present at {mine / 'tiny.csv'}" in capsys.readouterr().out
    assert server.requests == ["/mirror/other.txt"]


def test_data_fetch_refuses_unknown_names_with_the_valid_ones(
    capsys: pytest.CaptureFixture[str], registry: dict[str, bytes]
) -> None:
    assert tdbench(["data", "fetch", "tiny.csv", "nope.csv"]) == 2
    assert "unknown data file 'nope.csv'; valid names: tiny.csv, other.txt" in capsys.readouterr().err


def test_data_fetch_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: Server, registry: dict[str, bytes]
) -> None:
    server.serve("mirror/tiny.csv", b"oops", status=500)
    assert tdbench(["data", "fetch", "tiny.csv"]) == 1
    err = capsys.readouterr().err
    assert "'tiny.csv'" in err and f"{server.base}/tiny.csv" in err and "500" in err
    assert _cache(tmp_path) == []


def test_data_without_a_command_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert tdbench(["data"]) == 2
    assert "fetch" in capsys.readouterr().out
