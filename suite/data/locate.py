"""External data sets: one loader with a search path, checksums, downloads and clear messages when a file is missing.

Data files are never committed. :func:`locate` looks for a file, in order, in each folder of the ``TDBENCH_DATA``
environment variable (``os.pathsep``-separated), in the cache folder (``TDBENCH_CACHE``, by default the user's cache
folder, e.g. ``~/.cache/tdbench``) and in ``../shared/data`` beside the repository; when it is in none of them it
downloads it from the registry's URL (:mod:`suite.data.catalog`) into the cache, unless ``TDBENCH_OFFLINE`` is
set, and never while problems are listed or a grid is planned (:func:`downloads_deferred`). Every file is checked
against its size, then its SHA-256. A problem whose file is missing or corrupt reports itself unavailable with
:func:`unavailable_reason`, naming the file, where to put it and where it comes from. See docs/data.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from suite.data.catalog import KNOWN_FILES, DataFile
from suite.data.download import CACHE_VAR, DownloadFailed, default_cache, download_checked

__all__ = [
    "CACHE_VAR",
    "ENV_VAR",
    "KNOWN_FILES",
    "OFFLINE_VAR",
    "URL_VAR",
    "DataFile",
    "DataUnavailable",
    "downloads_deferred",
    "fetch",
    "find",
    "intact",
    "locate",
    "search_folders",
    "search_path",
    "unavailable_reason",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Folders searched first (``os.pathsep``-separated).
ENV_VAR = "TDBENCH_DATA"
#: Set (to anything but ``0``, ``false``, ``no``, ``off`` or nothing) to turn off downloads on first use.
OFFLINE_VAR = "TDBENCH_OFFLINE"
#: A base URL that replaces every registry URL by ``BASE/NAME`` (a mirror; the tests' local server).
URL_VAR = "TDBENCH_DATA_URL"


class DataUnavailable(FileNotFoundError):
    """A data file is missing, does not match its checksum, or could not be downloaded."""


#: Downloads on first use that failed in this process, by (file, URL), with the message: :func:`locate` does not try
#: them again (problems ask more than once); :func:`fetch` always does.
_FAILED: dict[tuple[str, str], str] = {}
#: What a problem's reason says when its data file is missing while downloads are deferred (a dry run plans on).
NOT_DOWNLOADED_YET = "is not downloaded yet"
#: True within :func:`downloads_deferred`: a missing file is reported as not downloaded yet.
_DEFERRED: ContextVar[bool] = ContextVar("tdbench_downloads_deferred", default=False)


def cache_folder() -> Path:
    """The folder downloads go to: ``TDBENCH_CACHE``, else the user's cache folder for tdbench."""
    return Path(os.environ[CACHE_VAR]) if os.environ.get(CACHE_VAR) else default_cache()


def search_folders() -> list[tuple[str, Path]]:
    """(label, folder) searched for data files, in order: ``TDBENCH_DATA``'s, the cache, ``../shared/data``."""
    folders = [(ENV_VAR, Path(p)) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    return [*folders, ("cache", cache_folder()), ("shared", REPO_ROOT.parent / "shared" / "data")]


def search_path() -> list[Path]:
    """Folders searched for data files, in order."""
    return [folder for _, folder in search_folders()]


def offline() -> bool:
    """Whether ``TDBENCH_OFFLINE`` turns off downloads on first use."""
    return os.environ.get(OFFLINE_VAR, "").strip().lower() not in ("", "0", "false", "no", "off")


def spec_for(name: str) -> DataFile:
    """The registry entry of a data file; KeyError listing the known names."""
    if name not in KNOWN_FILES:
        raise KeyError(f"unknown data file {name!r}; known: {', '.join(sorted(KNOWN_FILES))}")
    return KNOWN_FILES[name]


def source_url(spec: DataFile) -> str:
    """Where a file is downloaded from: ``TDBENCH_DATA_URL/NAME`` when that is set, else the registry's URL."""
    base = os.environ.get(URL_VAR, "").strip()
    return f"{base.rstrip('/')}/{spec.name}" if base else spec.url


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def intact(path: Path, spec: DataFile) -> bool:
    """Whether a file is the registry's: its size first (a file of another size is not read), then its SHA-256."""
    if spec.size and path.stat().st_size != spec.size:
        return False
    return sha256_of(path) == spec.sha256


@contextlib.contextmanager
def downloads_deferred() -> Iterator[None]:
    """Within the block (listing problems, planning a dry run) a missing file is not downloaded on first use.

    :func:`locate` and :func:`unavailable_reason` then say that the file is not downloaded yet, and how to get it.
    """
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def find(name: str) -> tuple[str, Path] | None:
    """(label, path) of the first copy of a known file in the search folders, unchecked; None if there is none."""
    spec_for(name)
    for label, folder in search_folders():
        if (folder / name).is_file():
            return label, folder / name
    return None


def fetch(name: str) -> Path:
    """Download a known file into the cache folder (replacing a copy there with the wrong checksum); its path."""
    spec = spec_for(name)
    url = source_url(spec)
    if not url:
        raise DataUnavailable(f"data file {name!r} has no download URL; it is: {spec.origin}")
    cached = cache_folder() / name
    if cached.is_file() and not intact(cached, spec):
        cached.unlink()  # else pooch hashes all of it first (a large corrupt copy: minutes)
    try:
        path = download_checked(url, spec.sha256, cache_folder(), name, spec.size)
    except DownloadFailed as exc:
        raise DataUnavailable(str(exc)) from exc
    _FAILED.pop((name, url), None)
    return path


def _checked(label: str, path: Path, spec: DataFile) -> Path:
    if intact(path, spec):
        return path
    size = path.stat().st_size
    sizes = f" (it has {size} bytes, the original {spec.size})" if spec.size and size != spec.size else ""
    remedy = (
        f"'tdbench data fetch {spec.name}' replaces it"
        if label == "cache"
        else f"replace it with the original file ({spec.origin}) from {source_url(spec) or 'its source'}"
    )
    raise DataUnavailable(f"{path} does not match the expected SHA-256 {spec.sha256[:12]}...{sizes}; {remedy}")


def locate(name: str, download: bool | None = None) -> Path:
    """Path of a known data file, checked against its size and SHA-256, downloaded into the cache if it is nowhere.

    ``download`` None downloads unless ``TDBENCH_OFFLINE`` is set or within :func:`downloads_deferred`. Raises
    DataUnavailable saying what to do.
    """
    spec = spec_for(name)
    found = find(name)
    if found is not None:
        return _checked(*found, spec)
    where = " or ".join(str(f) for f in search_path())
    allowed = not offline() if download is None else download
    if not allowed:
        why = f" (downloads on first use are off: {OFFLINE_VAR} is set)" if download is None else ""
        raise DataUnavailable(
            f"data file {name!r} not found; put it in {where} (or point {ENV_VAR} at its folder), or download it "
            f"with 'tdbench data fetch {name}'{why}. It is: {spec.origin}"
        )
    if download is None and _DEFERRED.get():
        raise DataUnavailable(
            f"data file {name!r} {NOT_DOWNLOADED_YET} (listing and planning do not download): 'tdbench run' "
            f"downloads it on first use, 'tdbench data fetch {name}' does now. It is: {spec.origin}"
        )
    attempt = (name, source_url(spec))
    if attempt in _FAILED:
        raise DataUnavailable(_FAILED[attempt])
    try:
        return fetch(name)
    except DataUnavailable as exc:
        _FAILED[attempt] = (
            f"data file {name!r} not found in {where}, and {exc}. Put it in one of those folders (or point {ENV_VAR} "
            f"at its folder), or try again with 'tdbench data fetch {name}'. It is: {spec.origin}"
        )
        raise DataUnavailable(_FAILED[attempt]) from exc


def unavailable_reason(*names: str) -> str | None:
    """None when every named file is present and intact (downloading a missing one unless deferred), else why not."""
    for name in names:
        try:
            locate(name)
        except DataUnavailable as exc:
            return str(exc)
    return None
