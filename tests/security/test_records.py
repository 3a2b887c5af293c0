"""Records read from disk (issue 36, part A): one schema checked on read, only regular files inside the results folder
read or cleaned up, and replayed budgets and counts bounded.

Each test reproduces one hole found by hostile probes; FIFO and symlink tests skip where the platform has neither.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from suite.report.build import report_from_folder
from suite.results import facts
from suite.results import records as rec

needs_fifos = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links on this platform")

REPO = Path(__file__).resolve().parents[2]
QUICK_RECORDS = REPO / "tests" / "fixtures" / "quick_records.json.gz"
SECRET = "the link's target: must stay as it is\n"


def _record(seed: int = 0, tv: float = 0.1, method: str = "mf") -> dict[str, Any]:
    """A small record of a timed run, with the fields the report and the runner read."""
    return {
        "problem": "toy",
        "method": method,
        "seed": seed,
        "status": "ok",
        "reason": None,
        "config_hash": "0123456789",
        "problem_facts": {
            "main_metric": "model_prob_tv",
            "higher_is_better": [],
            "reported_neg_elbo": {},
            "reported_dag_table": {},
            "sweep": None,
            "num_models": 2,
        },
        "metrics": {
            "model_prob_tv": {"value": tv, "se": 0.01},
            "cross_entropy": {"value": 1.5, "se": 0.1},
            "walltime_s": {"value": 2.0, "se": None},
        },
        "model_probs": {"id": ["a", "b"], "index": [0, 1], "truth": [0.6, 0.4], "estimate": [0.5, 0.5], "se": None},
        "budget": {"profile": "quick", "num_draws": 100, "time_budget_s": 2.0, "replayed": False, "over_budget": False},
        "counts": {"snapshots": [10, 20], "stop": 40},
        "trace": {
            "seconds": [0.5, 1.0, 2.0],
            "iterations": [10, 20, 40],
            "elbo": [None, None, None],
            "metrics": {"model_prob_tv": [tv, tv, tv]},
        },
        "timings_s": {"method_total": 2.0},
        "reference": {"kind": "exact"},
        "problem_config": {"size": 2},
    }


def _name(record: dict[str, Any]) -> str:
    return f"{record['problem']}__{record['method']}__seed{record['seed']}__{record['config_hash']}.json"


def _write(out: Path, record: dict[str, Any]) -> Path:
    """``record`` as a file in ``out/records`` under its own name; its path."""
    path = rec.records_dir(out) / _name(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def _loaded_without(out: Path, bad: Path) -> list[dict[str, Any]]:
    """The records ``load_records`` gives, after checking it warned about ``bad`` by name."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = rec.load_records(out)
    assert any(str(bad) in str(w.message) for w in caught), [str(w.message) for w in caught]
    return loaded


def _set(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.__setitem__(field, value)


def _set_metric(metric: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda record: record["metrics"].__setitem__(metric, value)


def _set_value(metric: str, value: float) -> Callable[[dict[str, Any]], None]:
    return lambda record: record["metrics"][metric].__setitem__("value", value)


WRONG_TYPES = {
    "budget is a string": _set("budget", "oops"),
    "trace is a string": _set("trace", "oops"),
    "a metric is a number": _set_metric("model_prob_tv", 0.3),
    "a metric is a list": _set_metric("walltime_s", []),
    "model_probs is a string": _set("model_probs", "oops"),
    "reference is a string": _set("reference", "oops"),
    "counts is a string": _set("counts", "oops"),
    "timings_s is a string": _set("timings_s", "oops"),
    "problem_config is a string": _set("problem_config", "oops"),
    "config_hash climbs out": _set("config_hash", "../../../x"),
    "trace seconds hold a string": lambda r: r["trace"].__setitem__("seconds", ["a", "b", "c"]),
    "model_probs lists differ in length": lambda r: r["model_probs"].__setitem__("estimate", [1.0]),
}
OUT_OF_RANGE = {
    "metric -inf": _set_value("model_prob_tv", -math.inf),
    "negative TV": _set_value("model_prob_tv", -0.2),
    "TV 1.5": _set_value("model_prob_tv", 1.5),
    "cross-entropy -inf": _set_value("cross_entropy", -math.inf),
    "negative walltime": _set_value("walltime_s", -1.0),
    "negative standard error": lambda r: r["metrics"]["cross_entropy"].__setitem__("se", -0.1),
    "negative TV along the trace": lambda r: r["trace"]["metrics"].__setitem__("model_prob_tv", [0.1, -0.5, 0.1]),
    "a probability of 2": lambda r: r["model_probs"].__setitem__("estimate", [2.0, -1.0]),
    "negative count": lambda r: r["counts"].__setitem__("stop", -3),
}


@pytest.mark.parametrize("change", list(WRONG_TYPES.values()), ids=list(WRONG_TYPES))
def test_a_record_with_a_field_of_the_wrong_type_is_named_and_treated_as_absent(tmp_path: Path, change) -> None:
    good = _write(tmp_path, _record(seed=0))
    bad_record = _record(seed=1)
    change(bad_record)
    bad = rec.records_dir(tmp_path) / _name(_record(seed=1))
    bad.write_text(json.dumps(bad_record))
    loaded = _loaded_without(tmp_path, bad)
    assert [r["seed"] for r in loaded] == [0] and good.exists() and bad.exists()


@pytest.mark.parametrize("change", list(OUT_OF_RANGE.values()), ids=list(OUT_OF_RANGE))
def test_a_record_with_an_impossible_value_is_named_and_never_ranked(tmp_path: Path, change) -> None:
    _write(tmp_path, _record(seed=0))
    bad_record = _record(seed=1)
    change(bad_record)
    bad = _write(tmp_path, bad_record)
    assert [r["seed"] for r in _loaded_without(tmp_path, bad)] == [0]


def test_the_report_of_a_folder_with_malformed_records_writes_the_good_ones(tmp_path: Path) -> None:
    _write(tmp_path, _record(seed=0, tv=0.2))
    for seed, change in enumerate([*WRONG_TYPES.values(), *OUT_OF_RANGE.values()], start=1):
        record = _record(seed=seed, method="evil", tv=0.0)
        change(record)
        (rec.records_dir(tmp_path) / _name(_record(seed=seed, method="evil"))).write_text(json.dumps(record))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = report_from_folder(tmp_path)
    assert "mf" in text and "evil" not in text and (tmp_path / "index.html").is_file()


def test_a_malformed_record_is_redone_by_a_rerun_and_read_back_as_a_failed_stand_in(tmp_path: Path) -> None:
    key = rec.RunKey("toy", "mf", 0, {"profile": "quick"})
    record = {**_record(seed=0), "config_hash": key.config_hash, "budget": "oops"}
    path = rec.record_path(tmp_path, key)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    with pytest.warns(UserWarning, match=f"{path}.*budget"):
        assert not rec.is_finished(tmp_path, key)
    with pytest.warns(UserWarning, match=str(path)):
        stand_in = rec.read_record(tmp_path, key)
    assert stand_in["status"] == "failed" and "budget" in stand_in["reason"]


def test_every_shipped_record_keeps_to_the_schema(tmp_path: Path) -> None:
    from suite.results.record_model import format_problem

    shipped = json.loads(gzip.decompress(QUICK_RECORDS.read_bytes()))
    broken = {name: format_problem(record) for name, record in shipped.items() if format_problem(record)}
    assert len(shipped) > 100 and broken == {}
    for name, record in list(shipped.items())[:20]:
        (tmp_path / "records").mkdir(exist_ok=True)
        (tmp_path / "records" / name).write_text(json.dumps(record))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(rec.load_records(tmp_path)) == 20


def test_failed_records_with_nan_or_empty_metrics_keep_to_the_schema(tmp_path: Path) -> None:
    failed = {**_record(seed=0), "status": "failed", "reason": "diverged", "metrics": {}, "trace": None}
    nan = {**_record(seed=1), "metrics": {"model_prob_tv": {"value": math.nan, "se": math.nan}}}
    for record in (failed, nan):
        _write(tmp_path, record)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["seed"] for r in rec.load_records(tmp_path)] == [0, 1]


# ------------------------------------------------------------------ problem facts: run as report


def test_a_rerun_on_a_record_without_problem_facts_says_what_to_do_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.cli.arguments import build_parser, grid_from_args
    from suite.cli.run_command import run_all
    from suite.run import plan_grid

    out = tmp_path / "smoke"
    grid = ["--profile", "smoke", "--problems", "sas", "--methods", "rjmcmc-baseline", "--seeds", "1"]
    argv = [*grid, "--out", str(out)]
    spec, execution = grid_from_args(build_parser("run_all.py").parse_args(argv))
    (planned,) = plan_grid(spec, execution).runs
    record = {**_record(), "problem": "sas", "method": "rjmcmc-baseline", "config_hash": planned.key.config_hash}
    record["budget"] = {**record["budget"], "profile": "smoke"}
    del record["problem_facts"]  # as records were written before they kept facts: the run is finished, not redone
    path = rec.write_record(out, planned.key, record)
    assert run_all(argv) == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"tdbench facts {out}" in err and "Traceback" not in err


# ------------------------------------------------------------------ only regular files inside the folder


def _returns_within(call: Callable[[], Any], fifo: Path, seconds: float = 5.0) -> bool:
    """Whether ``call`` returns within ``seconds`` (a reader stuck on ``fifo`` is then released by opening it)."""
    done = threading.Event()

    def target() -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
        except Exception:  # only whether it returns matters here
            pass
        done.set()

    threading.Thread(target=target, daemon=True).start()
    returned = done.wait(seconds)
    if not returned:  # release the blocked reader, so that the test process can end
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        done.wait(seconds)
    return returned


def _results_table(out: Path) -> Any:
    import tdbench.results

    return tdbench.results.load(out)


def _profiles_in(out: Path) -> set[str]:
    from suite.run.spec import profiles_in  # run's check that a folder holds no other profile's records

    return profiles_in(out)


READERS: dict[str, Callable[[Path], Any]] = {
    "load_records": rec.load_records,
    "load_replay_counts": rec.load_replay_counts,
    "add_missing_facts": facts.add_missing_facts,
    "read_record": lambda out: rec.read_record(out, rec.RunKey("toy", "fifo", 0, {})),
    "tdbench.results.load": _results_table,
    "spec.profiles_in": _profiles_in,
}


@needs_fifos
@pytest.mark.parametrize("reader", list(READERS.values()), ids=list(READERS))
def test_a_fifo_named_like_a_record_blocks_no_reader(tmp_path: Path, reader) -> None:
    _write(tmp_path, _record(seed=0))
    fifo = rec.records_dir(tmp_path) / f"toy__fifo__seed0__{rec.RunKey('toy', 'fifo', 0, {}).config_hash}.json"
    os.mkfifo(fifo)
    assert _returns_within(lambda: reader(tmp_path), fifo)


@needs_symlinks
def test_a_record_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_record(seed=1)))
    out = tmp_path / "out"
    _write(out, _record(seed=0))
    link = rec.records_dir(out) / _name(_record(seed=1))
    os.symlink(elsewhere, link)
    assert [r["seed"] for r in _loaded_without(out, link)] == [0]


@needs_symlinks
def test_clean_up_never_deletes_in_a_folder_that_draws_links_to(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale_name = f".x.npz.{int(dead.stdout)}.abc.tmp"
    (foreign / stale_name).write_text(SECRET)
    out = tmp_path / "out"
    rec.records_dir(out).mkdir(parents=True)
    os.symlink(foreign, out / "draws")
    os.symlink(foreign / stale_name, rec.records_dir(out) / stale_name)  # a link named like a stale temporary
    assert rec.remove_stale_temporaries(out) == 0
    assert (foreign / stale_name).read_text() == SECRET and (rec.records_dir(out) / stale_name).is_symlink()


@needs_symlinks
def test_the_write_probe_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    out = tmp_path / "out"
    rec.records_dir(out).mkdir(parents=True)
    os.symlink(victim, rec.records_dir(out) / f".write-probe-{os.getpid()}")
    rec.check_writable(out)
    assert victim.read_text() == SECRET


# ------------------------------------------------------------------ replayed budgets and counts


def _timed(budget: Any = 2.0, stop: Any = 40) -> dict[str, Any]:
    record = copy.deepcopy(_record(seed=0))
    record["budget"]["time_budget_s"] = budget
    record["counts"]["stop"] = stop
    return record


@pytest.mark.parametrize(
    "record",
    [_timed(budget=math.nan), _timed(budget=-5), _timed(budget=0), _timed(budget=1e308), _timed(stop=10**18)],
    ids=["budget NaN", "budget -5", "budget 0", "budget 1e308", "stop 10**18"],
)
def test_replaying_an_impossible_budget_or_count_is_refused_naming_the_file(tmp_path: Path, record) -> None:
    path = _write(tmp_path, record)
    with pytest.raises(ValueError, match=str(path)):
        rec.load_replay_counts(path)
    with pytest.raises(ValueError, match=str(path)):
        rec.load_replay_counts(tmp_path)


def test_a_week_long_budget_can_still_be_replayed(tmp_path: Path) -> None:
    path = _write(tmp_path, _timed(budget=604800.0, stop=10**9))
    (replay,) = rec.load_replay_counts(path).values()
    assert replay["time_budget_s"] == 604800.0 and replay["counts"]["stop"] == 10**9
