"""Downloads: pooch keeps a temporary file in the cache and renames it only when its SHA-256 is right; the transfer
is bounded here, by the file's size and a deadline, so that an endless or trickling server cannot fill the disk or
hang the command (docs/data.md, "Downloads")."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pooch
import requests
from tqdm import tqdm

#: The folder downloads go to, instead of the user's cache folder (``pooch.os_cache("tdbench")``).
CACHE_VAR = "TDBENCH_CACHE"
#: Seconds a whole download may take, from the request to the last byte; past it the download fails, nothing kept.
DEADLINE_S = 120.0
#: Seconds to open the connection, and seconds one read may wait for bytes (pooch's own default).
READ_TIMEOUT_S = 30.0
#: Bytes a server may send beyond the registry's size of the file before the download is stopped and refused.
SIZE_SLACK = 64 * 1024
#: Bytes read from the connection at a time.
CHUNK_BYTES = 64 * 1024


class DownloadFailed(OSError):
    """A download failed: the server's answer, the connection, the size, the deadline or the checksum."""


def default_cache() -> Path:
    """The user's cache folder for tdbench, e.g. ``~/.cache/tdbench`` on Linux."""
    return Path(pooch.os_cache("tdbench"))


def wants_progress_bar() -> bool:
    """A progress bar on a terminal; none in logs (CI, nohup)."""
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress_bar(total: int, shown: bool) -> Iterator[Callable[[int], object]]:
    """``advance(bytes)`` of a tqdm bar of ``total`` bytes (0: unknown) when ``shown``; else it draws nothing."""
    if not shown:
        yield lambda received: None
        return
    with tqdm(total=total or None, unit="B", unit_scale=True, ncols=79, leave=True) as bar:
        yield bar.update


@contextlib.contextmanager
def deadline(response: requests.Response, seconds: float) -> Iterator[threading.Event]:
    """Within the block, ``response``'s reads are stopped after ``seconds``; the event says whether they were."""
    expired = threading.Event()

    def stop() -> None:
        expired.set()
        # urllib3 >= 2.3 wakes a read blocked on a trickling server; with an older one the deadline is checked
        # after each chunk instead.
        with contextlib.suppress(Exception):
            response.raw.shutdown()

    timer = threading.Timer(max(seconds, 0.0), stop)
    timer.daemon = True
    timer.start()
    try:
        yield expired
    finally:
        timer.cancel()


def announced_length(response: requests.Response) -> int:
    """The body's length the server announces (Content-Length), 0 when it announces none."""
    length = response.headers.get("Content-Length", "").strip()
    return int(length) if length.isdigit() else 0


@dataclass(frozen=True)
class BoundedDownloader:
    """A pooch downloader over HTTP(S) that refuses more than ``size + SIZE_SLACK`` bytes and stops at a deadline."""

    size: int
    deadline_s: float
    read_timeout_s: float
    progressbar: bool = False

    @property
    def max_bytes(self) -> int:
        """The most bytes accepted before the download is refused."""
        return self.size + SIZE_SLACK

    def too_big(self, what: str) -> DownloadFailed:
        """The error of a body larger than the file: ``what`` the server did."""
        return DownloadFailed(
            f"the server {what}, but the file has {self.size} bytes (at most {self.max_bytes} are accepted); "
            "refused, nothing was kept"
        )

    def late(self) -> DownloadFailed:
        """The error of a download past its deadline."""
        return DownloadFailed(
            f"it did not finish within {self.deadline_s:g} s (DEADLINE_S of suite.data.download); nothing was kept"
        )

    def __call__(self, url: str, output_file: str, caller: object = None) -> None:
        """Stream ``url`` into ``output_file`` (pooch's temporary file); DownloadFailed when too big or too late."""
        started = time.monotonic()
        timeout = min(self.read_timeout_s, self.deadline_s)
        # Uncompressed, so that the bytes counted are the file's (and a compressed bomb is never expanded).
        with requests.get(url, stream=True, timeout=timeout, headers={"Accept-Encoding": "identity"}) as response:
            response.raise_for_status()
            announced = announced_length(response)
            if announced > self.max_bytes:
                raise self.too_big(f"announces {announced} bytes")
            left = self.deadline_s - (time.monotonic() - started)
            with deadline(response, left) as expired, open(output_file, "wb") as output:
                try:
                    self.copy(response, output, expired, announced)
                except (requests.RequestException, OSError) as exc:
                    if expired.is_set() and not isinstance(exc, DownloadFailed):
                        raise self.late() from exc
                    raise
                if expired.is_set():
                    raise self.late()

    def copy(self, response: requests.Response, output: IO[bytes], expired: threading.Event, total: int) -> None:
        """Write the body to ``output`` chunk by chunk, refusing it past ``max_bytes`` or once ``expired`` is set."""
        received = 0
        with progress_bar(total, self.progressbar) as advance:
            for chunk in response.iter_content(CHUNK_BYTES):
                received += len(chunk)
                if received > self.max_bytes:
                    raise self.too_big(f"sent more than {self.max_bytes} bytes")
                if expired.is_set():
                    raise self.late()
                output.write(chunk)
                advance(len(chunk))


def download_checked(url: str, sha256: str, folder: Path, name: str, size: int) -> Path:
    """``folder/name`` from ``url``, downloaded unless an intact copy is there; DownloadFailed leaves no file behind.

    pooch streams into a temporary file in ``folder``, checks its SHA-256 and only then renames it to ``name``: a
    failed, truncated, oversized, late, altered or interrupted (KeyboardInterrupt) download is deleted, and a copy
    with the wrong checksum is replaced. Over HTTP(S) at most ``size + SIZE_SLACK`` bytes are accepted, each read
    waits at most ``READ_TIMEOUT_S`` and the whole download at most ``DEADLINE_S`` seconds.
    """
    http = url.startswith(("http://", "https://"))
    downloader = BoundedDownloader(size, DEADLINE_S, READ_TIMEOUT_S, wants_progress_bar()) if http else None
    try:
        path = pooch.retrieve(url, known_hash=f"sha256:{sha256}", fname=name, path=folder, downloader=downloader)
    except (requests.RequestException, ValueError, OSError) as exc:
        cut = "the transfer was cut short: " if isinstance(exc, requests.exceptions.ChunkedEncodingError) else ""
        raise DownloadFailed(f"could not download {name!r} from {url}: {cut}{str(exc).rstrip('. ')}") from exc
    return Path(path)
