"""Read a results folder from Python: every metric of every run as one tidy table, and each run's saved draws.

>>> import tdbench.results
>>> table = tdbench.results.load("results/quick")            # doctest: +SKIP
>>> tv = table[table.metric == "model_prob_tv"]               # doctest: +SKIP
>>> saved = tdbench.results.draws(table.iloc[0])              # doctest: +SKIP

Nothing here imports ``problems/``, ``methods/`` or the registry: records and draw files are all it reads.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.results.draws_file import DrawsFileError, SavedDraws, load_draws, recorded_draws_path
from suite.results.records import RECORDS_DIR, load_record_file, load_records
from suite.results.table import COLUMN_DTYPES, RESULT_COLUMNS, record_name, results_frame

__all__ = [
    "COLUMN_DTYPES",
    "RESULT_COLUMNS",
    "DrawsFileError",
    "SavedDraws",
    "draws",
    "load",
    "records",
    "to_inference_data",
]
#: Key :func:`records` adds to each record: the path of its file.
RECORD_FILE = "record_file"
#: Per-model groups :func:`to_inference_data` makes at most (the most frequent models).
MAX_MODEL_GROUPS = 32
ARVIZ_HINT = "pip install tdbench[arviz]"


def results_folder(results_dir: str | os.PathLike[str]) -> Path:
    """The results folder of ``results_dir`` (which may also be its ``records/``); FileNotFoundError if absent."""
    folder = Path(results_dir)
    if folder.name == RECORDS_DIR and not (folder / RECORDS_DIR).is_dir():
        folder = folder.parent
    if not (folder / RECORDS_DIR).is_dir():
        raise FileNotFoundError(f"{results_dir}: not a results folder (no {RECORDS_DIR}/ folder in it)")
    return folder


def records(results_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every usable run record of a results folder, each with ``record_file`` (its path) added.

    Unusable record files are skipped with a warning naming them, as the reports do.
    """
    folder = results_folder(results_dir)
    loaded = load_records(folder)
    for record in loaded:
        record[RECORD_FILE] = str(folder / record_name(record))
    return loaded


def load(results_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per (run, metric) of a results folder (columns :data:`RESULT_COLUMNS`, integer seeds).

    The table's ``attrs["results_dir"]`` holds the folder, so :func:`draws` finds a row's draws.
    """
    folder = results_folder(results_dir)
    table = results_frame(load_records(folder))
    table.attrs["results_dir"] = str(folder)
    return table


def _read_record(path: Path) -> dict[str, Any]:
    """The record in ``path``; ValueError naming the file when it is not a usable record (read once, checked)."""
    return load_record_file(path)


def _record_and_folder(run: Any, root: str | os.PathLike[str] | None) -> tuple[dict[str, Any], Path, str]:
    """(the run's record, its results folder, a name for messages) for any form :func:`draws` accepts."""
    if isinstance(run, str | os.PathLike):
        path = Path(run)
        return _read_record(path), path.parent.parent, str(path)
    if isinstance(run, pd.Series):
        root = root if root is not None else run.attrs.get("results_dir")
        run = run.to_dict()
    if not isinstance(run, Mapping):
        raise TypeError(f"draws of a {type(run).__name__}: pass a record, a row of load(), or a file path")
    if run.get(RECORD_FILE):
        return _record_and_folder(run[RECORD_FILE], None)
    if root is None:
        raise ValueError("cannot tell which results folder holds this run: pass root=RESULTS_DIR")
    if "metrics" in run:  # a run record itself
        return dict(run), Path(root), record_name(run)
    if run.get("record"):  # a row of load()'s table
        path = Path(root) / run["record"]
        return _read_record(path), Path(root), str(path)
    raise TypeError("draws of a mapping that is neither a run record nor a row of load()'s table")


def draws(run: Any, root: str | os.PathLike[str] | None = None) -> SavedDraws:
    """The posterior draws saved by a run, checked against its record (:class:`suite.results.draws_file.SavedDraws`).

    ``run`` is a draw file (``.npz``, read without a record to check it against), a record file (``.json``),
    a record from :func:`records`, a row of :func:`load`'s table, or a record dict with ``root`` its results
    folder. Raises :class:`DrawsFileError` naming the file when the draws are missing, truncated or corrupted,
    and ValueError naming the record when the run saved none or its ``draws.path`` lies outside its results folder.
    """
    if isinstance(run, str | os.PathLike) and Path(run).suffix == ".npz":
        return load_draws(Path(run))
    record, folder, name = _record_and_folder(run, root)
    saved = record.get("draws")
    if not isinstance(saved, dict) or not isinstance(saved.get("path"), str):
        why = "it did not end ok" if record.get("status") != "ok" else "it was run before draws were saved"
        if record.get("status") == "ok" and "draws" in record:
            why = "its method returns no draws"
        raise ValueError(f"{name}: no saved draws ({why})")
    path = recorded_draws_path(folder, saved["path"], name)
    return load_draws(path, sha256=saved.get("sha256"), num=saved.get("num"))


def _model_labels(record: dict[str, Any] | None) -> dict[str, str]:
    """Model identifiers by model index (as a string) from a record's model table (its most probable models)."""
    table = (record or {}).get("model_probs")
    if not isinstance(table, dict) or not isinstance(table.get("index"), list) or not isinstance(table.get("id"), list):
        return {}
    return {_index_key(np.asarray(i)): str(label) for i, label in zip(table["index"], table["id"], strict=False)}


def _index_key(index: np.ndarray) -> str:
    return "_".join(str(int(v)) for v in np.atleast_1d(index))


def _group_name(label: str) -> str:
    return "model_" + re.sub(r"\W", "_", label)


def _datasets(saved: SavedDraws, labels: dict[str, str], max_models: int) -> dict[str, Any]:
    """xarray Datasets: ``posterior`` (model and log q per draw) and one group per model (its active theta)."""
    import xarray as xr

    num = len(saved)
    posterior: dict[str, Any] = {}
    if saved.model_index.ndim == 1:
        posterior["model"] = (("chain", "draw"), saved.model_index[None, :])
    else:
        posterior["model"] = (("chain", "draw", "model_word"), saved.model_index[None])
    if saved.log_q is not None:
        posterior["log_q"] = (("chain", "draw"), saved.log_q[None, :])
    groups = {"posterior": xr.Dataset(posterior, coords={"chain": [0], "draw": np.arange(num)})}
    models, inverse, counts = np.unique(saved.model_index, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    for k in np.argsort(-counts, kind="stable")[:max_models]:
        rows = np.flatnonzero(inverse == k)
        active = np.flatnonzero(saved.mask[rows[0]]) if saved.mask is not None else np.arange(saved.theta.shape[1])
        key = _index_key(models[k])
        variables: dict[str, Any] = {"theta": (("chain", "draw", "theta_dim"), saved.theta[rows][:, active][None])}
        if saved.log_q is not None:
            variables["log_q"] = (("chain", "draw"), saved.log_q[rows][None])
        coords = {"chain": [0], "draw": rows, "theta_dim": active}
        attrs = {"model_index": key, "model_id": labels.get(key, key), "num_draws_total": num}
        groups[_group_name(labels.get(key, key))] = xr.Dataset(variables, coords=coords, attrs=attrs)
    return groups


def to_inference_data(run: Any, root: str | os.PathLike[str] | None = None, max_models: int = MAX_MODEL_GROUPS) -> Any:
    """A run's saved draws as ArviZ data: ``posterior`` (model index, log q per draw) and per-model groups.

    Each of the ``max_models`` most frequent models gets a group ``model_<id>`` holding the theta of its draws in
    its active coordinates (``theta_dim`` = the coordinate numbers; ``draw`` = the draws' positions in the run)
    and their log q. ArviZ < 1 gives an ``InferenceData``; ArviZ >= 1 an ``xarray.DataTree``. Needs the
    ``arviz`` extra (``pip install tdbench[arviz]``); ``run`` is anything :func:`draws` accepts.
    """
    try:
        import arviz
    except ImportError as exc:
        raise ImportError(f"to_inference_data needs ArviZ, an optional dependency: {ARVIZ_HINT}") from exc
    record = None
    if not (isinstance(run, str | os.PathLike) and Path(run).suffix == ".npz"):
        record = _record_and_folder(run, root)[0]
    groups = _datasets(draws(run, root), _model_labels(record), max_models)
    if hasattr(arviz, "InferenceData") and int(arviz.__version__.split(".")[0]) < 1:
        with warnings.catch_warnings():  # per-model groups are not in ArviZ's list of standard group names
            warnings.simplefilter("ignore", UserWarning)
            return arviz.InferenceData(**groups)
    import xarray as xr

    return xr.DataTree.from_dict(groups)
