"""``tdbench.results``: the tidy table of a finished smoke run, its saved draws, and the optional ArviZ export."""

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tdbench.results as results
from suite.core.registry import make_method, make_problem
from suite.results.records import RunKey
from suite.results.table import COLUMN_DTYPES, RESULT_COLUMNS
from suite.run import parallel as par
from tests.run_specs import smoke_spec

ROOT = Path(__file__).resolve().parents[2]
RUNS = [("sas", "rjmcmc-baseline", 0), ("sas", "rjmcmc-baseline", 1), ("sas", "mf", 0)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder of three smoke runs, each written by a worker's ``run_spec`` (record and draws)."""
    out = tmp_path_factory.mktemp("smoke")
    for problem_name, method_name, seed in RUNS:
        problem = make_problem(problem_name)
        method = make_method(method_name).resolve(problem, "smoke")
        key = RunKey(problem_name, method_name, seed, {"profile": "smoke", "method_options": {}})
        spec = smoke_spec(key, out, method_settings=method.options(), num_draws=2000, checkpoint_every_s=0)
        status, reason = par.run_spec(spec)
        assert status == "ok", reason
    return out


def test_load_gives_every_metric_of_every_run_with_integer_seeds(finished: Path) -> None:
    table = results.load(finished)
    assert list(table.columns) == RESULT_COLUMNS
    assert table.dtypes.astype(str).to_dict() == {k: str(pd.Series(dtype=v).dtype) for k, v in COLUMN_DTYPES.items()}
    assert sorted(set(zip(table.problem, table.method, table.seed, strict=True))) == sorted(RUNS)
    assert {"model_prob_tv", "walltime_s"} <= set(table.metric)
    assert (table.status == "ok").all() and (table.profile == "smoke").all() and (table.num_draws == 2000).all()
    assert table.attrs["results_dir"] == str(finished)
    assert results.load(finished / "records").equals(table)  # the records folder itself works too


def test_draws_load_back_from_a_row_a_record_or_a_file(finished: Path) -> None:
    table = results.load(finished)
    row = table[(table.method == "mf") & (table.metric == "model_prob_tv")].iloc[0]
    from_row = results.draws(row)
    assert len(from_row) == 2000 and from_row.theta.dtype == np.float32 and from_row.model_index.dtype == np.int64
    assert from_row.log_q is not None and np.isfinite(from_row.log_q).all()
    record = next(r for r in results.records(finished) if r["method"] == "mf")
    np.testing.assert_array_equal(results.draws(record).theta, from_row.theta)
    np.testing.assert_array_equal(results.draws(finished / row["record"]).model_index, from_row.model_index)
    np.testing.assert_array_equal(results.draws(finished / row["draws"]).theta, from_row.theta)
    plain = json.loads((finished / row["record"]).read_text())
    np.testing.assert_array_equal(results.draws(plain, root=finished).theta, from_row.theta)
    with pytest.raises(ValueError, match="root=RESULTS_DIR"):
        results.draws(plain)


def test_corrupted_or_missing_draws_are_reported_with_the_file_name(finished: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    table = results.load(copy)
    first, second = (table[table.seed == s].iloc[0] for s in (0, 1))
    damaged = copy / first["draws"]
    damaged.write_bytes(damaged.read_bytes()[:-100])
    with pytest.raises(results.DrawsFileError, match=str(damaged)):
        results.draws(first)
    missing = copy / second["draws"]
    missing.unlink()
    with pytest.raises(results.DrawsFileError, match=f"{missing} does not exist"):
        results.draws(second)


def test_a_run_without_draws_and_a_folder_without_records_are_refused(finished: Path, tmp_path: Path) -> None:
    record = dict(results.records(finished)[0], draws=None)
    record.pop(results.RECORD_FILE)
    with pytest.raises(ValueError, match="no saved draws"):
        results.draws(record, root=finished)
    with pytest.raises(FileNotFoundError, match="not a results folder"):
        results.load(tmp_path)


def test_reading_results_imports_no_problem_method_or_registry_code(finished: Path) -> None:
    code = (
        "import sys, tdbench.results as r\n"
        f"t = r.load({str(finished)!r}); r.draws(t.iloc[0])\n"
        "bad = sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] in ('problems', 'methods') or m == 'suite.core.registry')\n"
        "print(bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_arviz_the_export_names_the_extra_to_install(finished: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "arviz", None)  # import arviz now raises ImportError
    with pytest.raises(ImportError, match=r"pip install tdbench\[arviz\]"):
        results.to_inference_data(results.records(finished)[0])


def _check_groups(groups: dict, saved: results.SavedDraws) -> None:
    """The posterior holds every draw's model; each model group the theta of its draws in active coordinates."""
    np.testing.assert_array_equal(groups["posterior"]["model"].values[0], saved.model_index)
    models = [name for name in groups if name.startswith("model_")]
    assert models and len(models) <= 2
    for name in models:
        group = groups[name]
        rows = group["draw"].values
        active = group["theta_dim"].values
        assert (saved.model_index[rows] == int(group.attrs["model_index"])).all()
        assert saved.mask[np.ix_(rows, active)].all() and saved.mask[rows].sum(1).max() == len(active)
        np.testing.assert_array_equal(group["theta"].values[0], saved.theta[np.ix_(rows, active)])


def test_arviz_export_has_one_group_per_model(finished: Path) -> None:
    arviz = pytest.importorskip("arviz")
    record = next(r for r in results.records(finished) if r["method"] == "mf")
    data = results.to_inference_data(record, max_models=2)
    saved = results.draws(record)
    if int(arviz.__version__.split(".")[0]) < 1:
        assert isinstance(data, arviz.InferenceData)
        _check_groups({name: data[name] for name in data.groups()}, saved)
    else:
        _check_groups({name: data[name].to_dataset() for name in data.children}, saved)


def test_arviz_1_gets_a_datatree(finished: Path, monkeypatch) -> None:
    xr = pytest.importorskip("xarray")
    monkeypatch.setitem(sys.modules, "arviz", types.SimpleNamespace(__version__="1.3.0"))
    record = next(r for r in results.records(finished) if r["method"] == "mf")
    tree = results.to_inference_data(record, max_models=2)
    assert isinstance(tree, xr.DataTree)
    _check_groups({name: tree[name].to_dataset() for name in tree.children}, results.draws(record))
