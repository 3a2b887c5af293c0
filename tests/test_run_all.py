"""run_all.py end to end: listing, refusing bad input before any work, resuming after a kill."""

import errno
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.cli import build_parser, grid_from_argv, main
from suite.core import checkpoint as ckpt
from suite.core.registry import available_methods, make_method, make_problem, method_class
from suite.results.records import RunKey
from suite.run import GridSpec, PlannedRun, place, plan_grid
from suite.run import parallel as par
from suite.run.plan import seeds_for
from tests.run_specs import smoke_spec

ROOT = Path(__file__).resolve().parent.parent


def test_list_shows_everything_registered(capsys: pytest.CaptureFixture) -> None:
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "sas" in out and "rjmcmc-baseline" in out and "Sinh-arcsinh" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--methods", "nope"],
            "unknown method(s) 'nope'; valid methods: bayesdag, bges, ctrj, dagma, dibs, fr, fr-vip, iaf, mf, mif, ",
        ),
        (["--problems", "sas,nope"], "unknown problem(s) 'nope'; valid problems: block-vs, "),
        (["--seeds", "0"], "--seeds must be a positive integer"),
        (["--draws", "-3"], "--draws must be a positive integer"),
        (["--eval-draws", "0"], "--eval-draws must be a positive integer"),
        (["--option", "vti-mcg"], "expected METHOD.NAME=VALUE"),
        (
            ["--option", "nope.flow=x"],
            "unknown method 'nope'; valid methods: bayesdag, bges, ctrj, dagma, dibs, fr, fr-vip, iaf, mf, mif, ",
        ),
        (["--option", "vti-mcg.flwo=x"], "vti-mcg has no option 'flwo'; valid: "),
        (
            ["--problems", "sas", "--option", "vti-surrogate.flow=nope(1)"],
            "vti-surrogate on sas: unknown flow type 'nope(1)'",
        ),
        (["--problem-option", "sas"], "expected PROBLEM.NAME=VALUE"),
        (["--problem-option", "nope.x=1"], "unknown problem 'nope'; valid problems: block-vs, "),
        (["--problem-option", "dag-mlp.sampels=64"], "dag-mlp has no option 'sampels'; valid: num_nodes, hidden, "),
        (["--problem-option", "dag-mlp.num_samples=64"], "--problem-option for dag-mlp, which this run does not plan"),
        (["--problems", "dag-mlp", "--problem-option", "dag-mlp.num_samples=0"], "dag-mlp: need num_samples >= 1"),
        (["--checkpoint-every", "-5"], "--checkpoint-every must be 0 (never save) or a positive number"),
    ],
)
def test_bad_input_is_refused_before_work(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not list((tmp_path / "out").glob("records/*.json"))


def test_unwritable_output_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["--out", str(blocker / "sub")]) == 2
    assert "not writable" in capsys.readouterr().err


@pytest.mark.slow
def test_bad_profile_exits_nonzero() -> None:
    proc = subprocess.run([sys.executable, "run_all.py", "--profile", "huge"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "quick" in proc.stderr


@pytest.mark.slow
def test_smoke_run_writes_records_and_leaderboard(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = [
        "--problems",
        "sas",
        "--profile",
        "smoke",
        "--seeds",
        "2",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--eval-draws",
        "500",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "== sas" in out and "rjmcmc-baseline" in out
    sas = make_problem("sas")
    applicable = [name for name in available_methods() if make_method(name).supports(sas) is None]
    expected = 2 * len(applicable)  # every applicable method x 2 seeds (--seeds overrides methods' defaults)
    assert len(list(tmp_path.glob("records/*.json"))) == expected
    assert (tmp_path / "leaderboard_sas.md").exists() and (tmp_path / "leaderboard_sas.png").exists()
    # Methods that do not apply get a leaderboard row saying so, with the reason, and no record; methods that
    # --methods all plans only in other profiles (dibs, bges: paper) get neither.
    board = (tmp_path / "leaderboard_sas.md").read_text()
    planned = [name for name in available_methods() if "smoke" in (method_class(name).planned_profiles or ["smoke"])]
    assert "dibs" not in planned and "| dibs |" not in board
    for name in set(planned) - set(applicable):
        assert f"| {name} | 0 | 0 |" in board and make_method(name).supports(sas) in board
    assert main(argv) == 0
    assert f"{expected} of {expected} runs already have records" in capsys.readouterr().out


@pytest.mark.slow
def test_leaderboards_show_earlier_runs_of_other_methods(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Running one method after another into the same folder puts both on the leaderboard, never stale runs."""
    common = ["--problems", "sas", "--profile", "smoke", "--seeds", "1", "--out", str(tmp_path), "--no-progress"]
    assert main([*common, "--methods", "rjmcmc-naive", "--eval-draws", "300"]) == 0
    assert main([*common, "--methods", "rjmcmc-baseline", "--eval-draws", "400"]) == 0  # other settings: not shown
    assert "rjmcmc-naive" not in (tmp_path / "leaderboard_sas.md").read_text()
    capsys.readouterr()
    assert main([*common, "--methods", "rjmcmc-baseline", "--eval-draws", "300"]) == 0
    out = capsys.readouterr().out
    assert "also show 1 earlier run in" in out and "rjmcmc-naive" in out
    board = (tmp_path / "leaderboard_sas.md").read_text()
    assert "rjmcmc-naive" in board and "rjmcmc-baseline" in board


def _plan(argv: list[str]) -> list[PlannedRun]:
    """The runs ``tdbench run ARGV`` plans."""
    return plan_grid(*grid_from_argv(argv)).runs


def test_method_options_reach_the_method_and_the_run_key(tmp_path: Path) -> None:
    argv = ["--problems", "sas", "--methods", "rjmcmc-baseline", "--profile", "smoke", "--seeds", "1"]
    plan = _plan([*argv, "--out", str(tmp_path), "--option", "rjmcmc-baseline.num_chains=64"])
    assert plan[0].method.num_chains == 64 and plan[0].key.config["method_options"]["num_chains"] == 64
    assert _plan([*argv, "--out", str(tmp_path)])[0].key.filename != plan[0].key.filename


def test_problem_options_reach_the_problem_and_the_run_key(tmp_path: Path) -> None:
    argv = ["--problems", "dag-mlp", "--methods", "vti-mcg", "--seeds", "1", "--out", str(tmp_path)]
    plan = _plan([*argv, "--problem-option", "dag-mlp.num_samples=64"])
    assert plan[0].problem.data.shape[0] == 64 and plan[0].key.config["problem_config"]["num_samples"] == 64
    assert _plan(argv)[0].key.filename != plan[0].key.filename


def test_workers_rebuild_the_problem_with_its_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process gets names and options only: the problem it rebuilds carries the --problem-option values."""
    seen = {}

    def fake_execute(problem, method, context, gold, plot_path, run_info, draws_path=None) -> dict:
        seen["rows"] = problem.data.shape[0]
        return {"status": "ok", "reason": None}

    monkeypatch.setattr(par, "execute", fake_execute)
    monkeypatch.setattr(par, "gold_draws", lambda problem, num: None)
    monkeypatch.setattr(par, "_GOLD", {})  # the fake draws must not stay cached for later runs in this process
    argv = ["--problems", "dag-mlp", "--methods", "vti-mcg", "--seeds", "1", "--out", str(tmp_path)]
    key = _plan([*argv, "--problem-option", "dag-mlp.num_samples=64"])[0].key
    par.run_spec(smoke_spec(key, tmp_path, eval_draws=10, jobs=2, problem_options={"num_samples": 64}))
    assert seen["rows"] == 64


@pytest.mark.parametrize("every", [120.0, 0.0])
def test_runs_get_a_checkpoint_slot_that_is_removed_with_the_record(
    every: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = {}

    def fake_execute(problem, method, context, gold, plot_path, run_info, draws_path=None) -> dict:
        seen["slot"] = slot = context.checkpoint
        if slot is not None:
            slot.save({"partial": True})
            assert slot.load() == {"partial": True}
        return {"status": "ok", "reason": None}

    monkeypatch.setattr(par, "execute", fake_execute)
    monkeypatch.setattr(par, "gold_draws", lambda problem, num: None)
    monkeypatch.setattr(par, "_GOLD", {})  # the fake draws must not stay cached for later runs in this process
    key = RunKey("sas", "vti-mcg", 0, {"x": 1})
    par.run_spec(smoke_spec(key, tmp_path, eval_draws=10, checkpoint_every_s=every))
    if every:
        assert seen["slot"] == ckpt.CheckpointSlot(ckpt.checkpoint_path(tmp_path, key.filename), every)
        assert seen["slot"].path.parent == tmp_path / "checkpoints"
    else:
        assert seen["slot"] is None
    assert (tmp_path / "records" / key.filename).is_file()
    assert not list((tmp_path / "checkpoints").glob("*")) if every else not (tmp_path / "checkpoints").exists()


class _Killed(KeyboardInterrupt):
    """Stands for the process being stopped right after a checkpoint save."""


def _stop_after_saves(monkeypatch: pytest.MonkeyPatch, saves: int) -> None:
    real_save, count = ckpt.CheckpointSlot.save, []

    def save(self: ckpt.CheckpointSlot, state: dict) -> None:
        real_save(self, state)
        count.append(1)
        if len(count) == saves:
            raise _Killed

    monkeypatch.setattr(ckpt.CheckpointSlot, "save", save)


@pytest.mark.slow
def test_an_interrupted_vti_run_resumes_from_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """run_all.py again after an interrupt: same record numbers as an uninterrupted run, walltime of both parts."""
    common = ["--problems", "sas", "--methods", "vti-mcg", "--profile", "smoke", "--seeds", "1", "--no-progress"]
    common += ["--eval-draws", "300", "--jobs", "1", "--checkpoint-every", "1e-9"]
    assert main([*common, "--out", str(tmp_path / "plain")]) == 0
    out = tmp_path / "resumed"
    _stop_after_saves(monkeypatch, 60)
    assert main([*common, "--out", str(out)]) == 130
    assert "continue from their last one" in capsys.readouterr().err
    assert len(list((out / "checkpoints").glob("*.pt"))) == 1 and not list((out / "records").glob("*.json"))
    monkeypatch.undo()
    assert main([*common, "--out", str(out)]) == 0
    (plain,) = [json.loads(p.read_text()) for p in (tmp_path / "plain" / "records").glob("*.json")]
    (resumed,) = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    assert resumed["diagnostics"]["resumed_from"] == {"replicate": 0, "iteration": 60}
    assert "model_prob_tv" in plain["metrics"]
    for metric in plain["metrics"].keys() - {"walltime_s"}:
        assert resumed["metrics"][metric] == plain["metrics"][metric], metric
    # The trace continues across the interruption: the same points, no gap, no duplicate.
    assert resumed["trace"]["iterations"] == plain["trace"]["iterations"]
    assert resumed["trace"]["metrics"] == plain["trace"]["metrics"]
    seconds = resumed["trace"]["seconds"]
    assert all(b > a for a, b in itertools.pairwise(seconds))
    assert not list((out / "checkpoints").glob("*"))  # removed with the record

    # --force starts afresh: the checkpoint of an interrupted attempt is dropped.
    _stop_after_saves(monkeypatch, 30)
    assert main([*common, "--out", str(out), "--force"]) == 130
    monkeypatch.undo()
    assert main([*common, "--out", str(out), "--force"]) == 0
    (forced,) = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    assert "resumed_from" not in forced["diagnostics"]


def test_methods_may_ask_for_fewer_default_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    quick = GridSpec(problems="sas", methods="vti-surrogate,rjmcmc-baseline", profile="quick")
    assert seeds_for(make_method("vti-surrogate"), quick) == 3  # every method of the default run: 3 seeds
    monkeypatch.setattr(type(make_method("vti-surrogate")), "default_seeds", {"quick": 1})
    assert seeds_for(make_method("vti-surrogate"), quick) == 1
    assert seeds_for(make_method("rjmcmc-baseline"), quick) == 3
    given = GridSpec(problems="sas", methods="vti-surrogate", profile="quick", seeds=5)
    assert seeds_for(make_method("vti-surrogate"), given) == 5


def test_run_keys_change_with_the_profile_preset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Options left at None come from the profile's preset, so a changed preset gives new record names."""
    argv = ["--problems", "sas", "--methods", "vti-surrogate", "--out", str(tmp_path)]
    before = _plan(argv)[0].key
    cls = type(make_method("vti-surrogate"))
    monkeypatch.setattr(cls, "profiles", {**cls.profiles, "quick": {**cls.profiles["quick"], "num_iterations": 1234}})
    after = _plan(argv)[0].key
    assert after.config["profile_preset"]["num_iterations"] == 1234
    assert before.filename != after.filename


def _settled_records(records: Path, quiet_for: float = 1.0) -> dict[str, bytes]:
    """The records once none has appeared for `quiet_for` seconds (a killed worker may still be mid-rename)."""
    seen, since = None, time.time()
    while True:
        now = {p.name: p.read_bytes() for p in records.glob("*.json")}
        if now.keys() != (seen or {}).keys():
            seen, since = now, time.time()
        elif time.time() - since >= quiet_for:
            return now
        time.sleep(0.05)


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.slow
def test_killed_run_resumes_without_losing_or_duplicating_records(tmp_path: Path, jobs: str) -> None:
    cmd = [
        sys.executable,
        "run_all.py",
        "--problems",
        "sas",
        "--profile",
        "smoke",
        "--methods",
        "rjmcmc-baseline",
        "--seeds",
        "8",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--eval-draws",
        "500",
        "--jobs",
        jobs,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # A session of its own, so that one kill reaches the parent and its workers at the same moment.
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    records = tmp_path / "records"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(records.glob("*.json"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _settled_records(records)
    assert 2 <= len(before) < 8, "the kill must land mid-run"

    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(before)} of 8 runs already have records" in done.stdout
    after = {p.name: p.read_bytes() for p in records.glob("*.json")}
    assert len(after) == 8 and not list(records.glob(".*"))  # all runs, no duplicates, no temporaries
    assert all(after[name] == data for name, data in before.items())  # finished records untouched


@pytest.mark.slow
def test_parallel_runs_match_serial_runs(tmp_path: Path) -> None:
    """Worker processes rebuild each run from names and options: same seeds, same numbers as one at a time."""
    common = ["--problems", "sas", "--methods", "rjmcmc-baseline,mf", "--profile", "smoke", "--seeds", "2"]
    common += ["--no-progress", "--eval-draws", "300"]
    for jobs in ("1", "2"):
        assert main([*common, "--out", str(tmp_path / jobs), "--jobs", jobs]) == 0
    serial = {p.name: json.loads(p.read_text()) for p in (tmp_path / "1" / "records").glob("*.json")}
    parallel = {p.name: json.loads(p.read_text()) for p in (tmp_path / "2" / "records").glob("*.json")}
    assert serial.keys() == parallel.keys() and len(serial) == 4
    for name, record in serial.items():
        assert record["parallel"] == {"jobs": 1, "threads_per_job": record["environment"]["torch_threads"]}
        assert parallel[name]["parallel"]["jobs"] == 2 and parallel[name]["environment"]["torch_threads"] == 1
        for metric in ("model_prob_tv", "cross_entropy"):
            assert parallel[name]["metrics"][metric]["value"] == pytest.approx(record["metrics"][metric]["value"])


# Issue 18: option values, input limits, results folders, exit statuses and a full disk.

SMALL = ["--problems", "sas", "--methods", "rjmcmc-baseline", "--profile", "smoke", "--seeds", "1", "--no-progress"]
SMALL += ["--eval-draws", "300", "--jobs", "1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--option", "rjmcmc-baseline.aux_scale=NaN"], "rjmcmc-baseline.aux_scale must be a finite number, got NaN"),
        (["--option", "rjmcmc-baseline.aux_scale=Infinity"], "aux_scale must be a finite number, got Infinity"),
        (["--option", "rjmcmc-baseline.target_accept=-Infinity"], "target_accept must be a finite number"),
        (["--option", "rjmcmc-baseline.num_chains=1.5"], "num_chains must be an integer or null, got 1.5"),
        (["--option", "rjmcmc-baseline.num_chains=true"], "num_chains must be an integer or null, got true"),
        (["--option", "rjmcmc-baseline.num_chains=Infinity"], "num_chains must be an integer or null, got Infinity"),
        (["--option", "rjmcmc-baseline.num_chains=1e30"], "num_chains must be an integer or null"),
        (["--option", "rjmcmc-baseline.within_moves=99999999999999999999"], "within_moves must be an integer"),
        (["--option", "rjmcmc-baseline.progress=1"], "has no option 'progress'"),
        (["--option", "rjmcmc-baseline.dtype=float32"], "rjmcmc-baseline has no option 'dtype'; valid: num_chains"),
        (["--option", "rjmcmc-baseline.matching=nope"], "unknown matching 'nope'; valid: standardised, identity"),
        (["--option", "rjmcmc-naive.num_chains=8"], "--option for rjmcmc-naive, which this run does not plan"),
        (["--option", "fr.learning_rates=[0.1,NaN]"], "fr.learning_rates must be a list, each item a finite number"),
        (["--problem-option", "dag-mlp.data_seed=0.5"], "dag-mlp.data_seed must be an integer, got 0.5"),
        (["--problem-option", "dag-mlp.bias=1"], "dag-mlp.bias must be true or false, got 1"),
        (["--problem-option", "dag-mlp.edge_prob=NaN"], "dag-mlp.edge_prob must be a finite number, got NaN"),
    ],
)
def test_option_values_are_checked_against_their_types(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each value is refused with exit status 2 and a message before any run (no worker, no record)."""
    monkeypatch.setattr(par, "run_spec", _no_run)
    problems = ["--problems", "dag-mlp"] if argv[0] == "--problem-option" else []
    assert main([*SMALL, *problems, *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("run_all.py: error:")
    assert not list(tmp_path.glob("records/*.json"))


def _no_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("a run started although the input was bad")


def test_option_validator_accepts_what_the_types_allow() -> None:
    from suite.core.options import OptionError, check_option, method_annotations, problem_annotations
    from suite.core.registry import method_class, problem_class

    rj = method_annotations(method_class("rjmcmc-baseline"))
    assert check_option("rj", "num_chains", None, rj["num_chains"]) is None
    assert check_option("rj", "num_chains", 64, rj["num_chains"]) == 64
    assert check_option("rj", "aux_scale", 2, rj["aux_scale"]) == 2  # an integer is a number
    assert "dtype" not in rj and "progress" not in rj  # run settings, not options: --dtype, --no-progress
    assert check_option("any", "dtype", "float32", str) == "float32"  # a problem or plug-in option named dtype
    fr = method_annotations(method_class("fr"))
    assert check_option("fr", "learning_rates", [0.1, 0.01], fr["learning_rates"]) == [0.1, 0.01]
    vti = method_annotations(method_class("vti-surrogate"))
    assert check_option("vti", "flow", 1, vti["flow"], text="1") == "1"  # a string option keeps the text as typed
    factors = problem_annotations(problem_class("factor-analysis"))["factors"]
    assert check_option("fa", "factors", [1, 2], factors) == [1, 2]
    with pytest.raises(OptionError, match="each item an integer"):
        check_option("fa", "factors", [1.5], factors)
    with pytest.raises(OptionError, match="must be true or false"):
        check_option("vti", "squish", 0, vti["squish"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "10000000000"], "--seeds 10000000000 is more than this suite allows (10,000)"),
        (["--draws", "1000000000"], "--draws 1000000000 is more than this suite allows (10,000,000)"),
        (["--eval-draws", "1000000000"], "--eval-draws 1000000000 is more than this suite allows"),
        (["--out", str(ROOT)], "is the repository root"),
    ],
)
def test_limits_are_refused_at_once(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(par, "run_spec", _no_run)
    if argv[0] != "--out":
        argv = [*argv, "--out", str(tmp_path)]
    assert main([*SMALL, *argv]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("records/*.json")) and not list(ROOT.glob("records/*.json"))


@pytest.mark.parametrize("out", ["", "   "])
def test_an_empty_results_folder_name_is_refused(out: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*SMALL, "--out", out])
    assert stop.value.code == 2
    assert "--out: the results folder must be named" in capsys.readouterr().err


def test_jobs_beyond_the_usable_cores_are_capped(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(par, "usable_cores", lambda: 3)
    placement = place(*grid_from_argv([*SMALL, "--jobs", "64", "--out", str(tmp_path)]))
    assert placement.jobs == 3
    assert "note: --jobs 64 is more than the 3 usable CPU core(s); running 3 at a time" in placement.notes
    assert place(*grid_from_argv([*SMALL, "--jobs", "2", "--out", str(tmp_path)])).jobs == 2


def test_records_of_another_profile_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "records").mkdir()
    record = {"problem": "sas", "method": "mf", "seed": 0, "status": "ok", "budget": {"profile": "quick"}}
    (tmp_path / "records" / "sas__mf__seed0__0123456789.json").write_text(json.dumps(record))
    assert main([*SMALL, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds records of profile quick" in err and "--out results/smoke" in err
    assert len(list(tmp_path.glob("records/*.json"))) == 1


def test_failed_methods_are_results_and_leaderboards_state_their_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose method failed is a result (exit 0, summarised); every leaderboard names its profile."""
    from suite.core.method import Result
    from suite.core.registry import method_class

    monkeypatch.setattr(method_class("rjmcmc-baseline"), "run", lambda self, *a: Result.failed("boom"))
    assert main([*SMALL, "--seeds", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 runs failed in their method" in out and "Profile: smoke." in out
    assert "Profile: smoke." in (tmp_path / "leaderboard_sas.md").read_text()
    assert len(list(tmp_path.glob("records/*.json"))) == 2


def test_a_run_without_its_record_gives_exit_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies (or fails outside the method) leaves no record: shown on the leaderboard, exit status 1."""

    def dying_workers(specs: list[par.RunSpec], jobs: int, threads: int):
        for spec in specs:
            yield spec, "failed", "worker process failed: BrokenProcessPool: a child process terminated abruptly"

    monkeypatch.setattr(par, "run_in_workers", dying_workers)
    argv = [*SMALL, "--seeds", "2", "--jobs", "2", "--out", str(tmp_path)]
    monkeypatch.setattr(par, "usable_cores", lambda: 2)
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "2 of 2 runs ended without a record" in captured.err
    assert "BrokenProcessPool" in (tmp_path / "leaderboard_sas.md").read_text()
    assert "exit status" in build_parser().format_help() and "130  interrupted" in build_parser().format_help()


@pytest.mark.slow
def test_workers_report_infrastructure_errors_as_runs_without_records(tmp_path: Path) -> None:
    """An error outside the method in a real worker (here: the record cannot be written) is a failed run, no record."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    plan = _plan([*SMALL, "--out", str(tmp_path / "ok")])
    spec = smoke_spec(plan[0].key, blocker, method_settings=plan[0].method.options(), jobs=2)
    outcomes = list(par.run_in_workers([spec, spec], jobs=2, threads=1))
    assert [status for _, status, _ in outcomes] == ["failed", "failed"]
    assert all(reason.startswith("worker process failed:") for _, _, reason in outcomes)


def test_disk_full_while_writing_a_record(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suite.results import records as rec

    def full(out: Path, key: RunKey, record: dict, exclusive: bool = False) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rec, "write_record", full)
    assert main([*SMALL, "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "disk full while writing" in err and str(tmp_path / "records") in err
    assert not list(tmp_path.glob("records/*.json"))


def test_disk_full_while_writing_leaderboards_leaves_no_empty_table(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pandas as pd

    def full(self: pd.DataFrame, path: Path, **kwargs: object) -> None:
        Path(path).write_text("")  # the file is created, then the disk fills up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    assert main([*SMALL, "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"disk full while writing {tmp_path / 'records_long.csv'}" in err
    assert not (tmp_path / "records_long.csv").exists() and not list(tmp_path.glob(".*.tmp"))
    assert len(list(tmp_path.glob("records/*.json"))) == 1  # the finished run keeps its record


POSITIVE = "must be a positive number of seconds"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", POSITIVE),
        ("-3", POSITIVE),
        ("nan", POSITIVE),
        ("inf", POSITIVE),
        ("ten", "expected a number of seconds, got 'ten'"),
        ("", "expected a number of seconds"),
    ],
)
def test_a_bad_time_budget_is_refused_before_any_work(
    value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(par, "run_spec", _no_run)
    with pytest.raises(SystemExit) as stop:
        main([*SMALL, "--time-budget", value, "--out", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --time-budget" in err and message in err
    assert not list(tmp_path.glob("records/*.json"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--time-budget", "5", "--no-time-budget"], "--time-budget and --no-time-budget contradict each other"),
        (["--replay-counts", "no-such-folder"], "--replay-counts: no-such-folder: no such record file or folder"),
    ],
)
def test_contradictory_budget_flags_are_refused(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(par, "run_spec", _no_run)
    assert main([*SMALL, *argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_quick_runs_get_their_problems_time_budget_and_others_their_iterations(tmp_path: Path) -> None:
    for profile, flags, expected in [
        ("quick", [], make_problem("sas").time_budgets["quick"]),
        ("quick", ["--time-budget", "2.5"], 2.5),
        ("quick", ["--no-time-budget"], None),
        ("smoke", [], None),
        ("paper", ["--time-budget", "7"], 7.0),
    ]:
        argv = ["--problems", "sas", "--methods", "rjmcmc-baseline", "--profile", profile, *flags]
        plan = _plan([*argv, "--out", str(tmp_path / profile)])
        assert {run.time_budget_s for run in plan} == {expected}
        assert {run.key.config["time_budget_s"] for run in plan} == {expected}


@pytest.mark.slow
def test_a_timed_run_replayed_from_its_counts_gives_the_same_numbers(tmp_path: Path) -> None:
    """--replay-counts: the same seed with the recorded iteration counts reproduces the timed run bitwise."""
    timed, replayed = tmp_path / "timed", tmp_path / "replayed"
    argv = [*SMALL, "--methods", "rjmcmc-baseline,mf"]
    assert main([*argv, "--time-budget", "1.5", "--out", str(timed)]) == 0
    assert main([*argv, "--replay-counts", str(timed), "--out", str(replayed)]) == 0
    from suite.report.compare import differences
    from suite.results.records import load_records

    before, after = load_records(timed), load_records(replayed)
    assert len(before) == len(after) == 2 and all(r["status"] == "ok" for r in before + after)
    assert differences(before, after) == []
    for record in after:
        assert record["budget"]["replayed"] and record["budget"]["time_budget_s"] == 1.5
        original = next(r for r in before if r["method"] == record["method"])
        assert record["counts"] == original["counts"]
        assert record["trace"]["iterations"] == original["trace"]["iterations"]
