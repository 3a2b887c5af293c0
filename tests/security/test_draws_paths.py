"""Draw files named by records (issue 36): a record's ``draws.path`` never leads a reader out of its results folder,
and a damaged draw file leaves no open file behind."""

from __future__ import annotations

import gc
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tdbench.results
from suite.results.draws_file import DrawsFileError, load_draws, save_draws

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links on this platform")


def _draws(path: Path) -> dict[str, Any]:
    """Valid draws saved at ``path``; the record's ``draws`` entry for them."""
    rng = np.random.default_rng(0)
    entry = save_draws(path, rng.integers(0, 3, size=50), rng.normal(size=(50, 2)))
    return {"path": None, **entry}


def _results(tmp_path: Path, recorded: str, entry: dict[str, Any]) -> Path:
    """A results folder with one record whose ``draws.path`` is ``recorded``; the record file's path."""
    record = {
        "problem": "toy",
        "method": "mf",
        "seed": 0,
        "status": "ok",
        "config_hash": "0123456789",
        "metrics": {},
        "draws": {**entry, "path": recorded},
    }
    path = tmp_path / "out" / "records" / "toy__mf__seed0__0123456789.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_draws_path_out_of_the_results_folder_is_refused_naming_the_record(tmp_path: Path, where: str) -> None:
    outside = tmp_path / "x.npz"
    entry = _draws(outside)
    record_file = _results(tmp_path, "../x.npz" if where == "relative" else str(outside), entry)
    with pytest.raises(ValueError, match=str(record_file)):
        tdbench.results.draws(record_file)
    record = json.loads(record_file.read_text())
    with pytest.raises(ValueError, match=r"draws\.path"):
        tdbench.results.draws(record, root=tmp_path / "out")  # a record held in memory is checked too


@needs_symlinks
def test_a_draw_file_that_links_out_of_the_results_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "x.npz"
    entry = _draws(outside)
    record_file = _results(tmp_path, "draws/toy__mf__seed0__0123456789.npz", entry)
    (tmp_path / "out" / "draws").mkdir()
    os.symlink(outside, tmp_path / "out" / "draws" / "toy__mf__seed0__0123456789.npz")
    with pytest.raises(ValueError, match=f"{record_file}.*outside"):
        tdbench.results.draws(record_file)


def test_draws_inside_the_folder_are_still_read(tmp_path: Path) -> None:
    entry = _draws(tmp_path / "out" / "draws" / "toy__mf__seed0__0123456789.npz")
    record_file = _results(tmp_path, "draws/toy__mf__seed0__0123456789.npz", entry)
    assert len(tdbench.results.draws(record_file)) == 50


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_a_truncated_draw_file_leaves_no_open_file(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "d.npz"
    _draws(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            load_draws(path)
        except DrawsFileError as exc:
            assert str(path) in str(exc)
        else:
            pytest.fail("a truncated draw file was read")
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
