"""Downloads with pooch: into a cache folder through a temporary file, kept only when its SHA-256 is right."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pooch
import requests

#: The folder downloads go to, instead of the user's cache folder (``pooch.os_cache("tdbench")``).
CACHE_VAR = "TDBENCH_CACHE"


class DownloadFailed(OSError):
    """A download failed: the server's answer, the connection, or the checksum of what arrived."""


def default_cache() -> Path:
    """The user's cache folder for tdbench, e.g. ``~/.cache/tdbench`` on Linux."""
    return Path(pooch.os_cache("tdbench"))


def wants_progress_bar() -> bool:
    """A progress bar on a terminal when tqdm is installed; none in logs (CI, nohup) or without tqdm."""
    return sys.stderr.isatty() and importlib.util.find_spec("tqdm") is not None


def download(url: str, sha256: str, folder: Path, name: str) -> Path:
    """``folder/name`` from ``url``, downloaded unless an intact copy is there; DownloadFailed leaves no file behind.

    pooch streams into a temporary file in ``folder``, checks its SHA-256 and only then renames it to ``name``: a
    failed, truncated or altered download is deleted, and a copy with the wrong checksum is replaced.
    """
    http = url.startswith(("http://", "https://"))
    downloader = pooch.HTTPDownloader(progressbar=wants_progress_bar()) if http else None
    try:
        path = pooch.retrieve(url, known_hash=f"sha256:{sha256}", fname=name, path=folder, downloader=downloader)
    except (requests.RequestException, ValueError, OSError) as exc:
        cut = "the transfer was cut short: " if isinstance(exc, requests.exceptions.ChunkedEncodingError) else ""
        raise DownloadFailed(f"could not download {name!r} from {url}: {cut}{str(exc).rstrip('. ')}") from exc
    return Path(path)
