"""External data sets: one loader with a search path, checksums and clear messages when a file is missing.

Data files are never committed. They are looked up, in order, in each folder
of the ``TDBENCH_DATA`` environment variable (``os.pathsep``-separated) and in
``../shared/data`` beside the repository. A problem whose file is missing or
corrupt reports itself unavailable with :func:`unavailable_reason`, naming the
file, where to put it and where it comes from.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_VAR = "TDBENCH_DATA"


@dataclass(frozen=True)
class DataFile:
    """A data file a problem needs: its name, SHA-256 and provenance."""

    name: str
    sha256: str
    origin: str


#: Every external file the problems use (see ../shared/data/README.md for provenance).
KNOWN_FILES = {
    f.name: f
    for f in (
        DataFile(
            "block_vs.csv",
            "0023993e3f8d17ce5cde2f61dd58af745df07601c7b1a14a0d06179d08a08e62",
            "simulated robust block variable-selection data distributed with the TRJ paper's code (80 rows)",
        ),
        DataFile(
            "fa_exchange_rates.npy",
            "d38d8c4bdb68fcfe20380633342b6d39ce28438aa735b1793f145e240b771564",
            "monthly exchange rates of six currencies against GBP, 1975-1986 (West & Harrison 1997), "
            "standardised, 143 x 6, as distributed with the TRJ paper's code",
        ),
        DataFile(
            "sachs_cyto_full_data.csv",
            "fc331dcd0bc1d8765986b88cd1d23dd5a3f52e4ffc299fdf96de9d522ddf01aa",
            "Sachs et al. (2005) flow cytometry data, 7466 x 11, as shipped with the cdt package",
        ),
        DataFile(
            "sachs_target_edges.csv",
            "398bc137b2669432ef12e0c57d3783fa876c1c7e2377577d3e75410f085485f6",
            "the 18 consensus edges of the Sachs network, as shipped with the cdt package",
        ),
    )
}


class DataUnavailable(FileNotFoundError):
    """A data file is missing or does not match its checksum."""


def search_path() -> list[Path]:
    """Folders searched for data files, in order."""
    folders = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    return [*folders, REPO_ROOT.parent / "shared" / "data"]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate(name: str) -> Path:
    """Path of a known data file, checked against its SHA-256; raises DataUnavailable with instructions."""
    if name not in KNOWN_FILES:
        raise KeyError(f"unknown data file {name!r}; known: {', '.join(sorted(KNOWN_FILES))}")
    spec = KNOWN_FILES[name]
    folders = search_path()
    for folder in folders:
        path = folder / name
        if path.is_file():
            if _sha256(path) != spec.sha256:
                raise DataUnavailable(
                    f"{path} does not match the expected SHA-256 {spec.sha256[:12]}...; "
                    f"replace it with the original file ({spec.origin})"
                )
            return path
    where = " or ".join(str(f) for f in folders)
    raise DataUnavailable(
        f"data file {name!r} not found; put it in {where} (or point {ENV_VAR} at its folder). It is: {spec.origin}"
    )


def unavailable_reason(*names: str) -> str | None:
    """None when every named file is present and intact, else the first problem's message."""
    for name in names:
        try:
            locate(name)
        except DataUnavailable as exc:
            return str(exc)
    return None
