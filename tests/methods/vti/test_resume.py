"""VTI runs interrupted part way continue from their checkpoint with exactly the result and trace of an
uninterrupted run."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from suite.core import checkpoint as ckpt
from suite.core.context import RunContext
from suite.core.method import Result
from suite.core.registry import make_method, make_problem
from suite.run.runner import resolve_and_run

OPTIONS = {"num_iterations": 40, "warmup_iterations": 10}


class _Interrupted(Exception):
    """Stands for the process being killed right after a save."""


def _run(
    name: str,
    slot: ckpt.CheckpointSlot | None,
    problem: str = "robust-vs",
    time_budget_s: float | None = None,
    **options,
) -> tuple[Result, RunContext]:
    method = make_method(name, **{**OPTIONS, **options})
    context = RunContext(seed=5, profile="smoke", num_draws=64, checkpoint=slot, time_budget_s=time_budget_s)
    return resolve_and_run(method, make_problem(problem), context), context


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, saves: int) -> list[dict]:
    """Make the ``saves``-th checkpoint save the last thing the run does; returns the states saved."""
    saved: list[dict] = []
    real_save = ckpt.CheckpointSlot.save

    def save(self: ckpt.CheckpointSlot, state: dict) -> None:
        real_save(self, state)
        saved.append(state)
        if len(saved) == saves:
            raise _Interrupted

    monkeypatch.setattr(ckpt.CheckpointSlot, "save", save)
    return saved


def _assert_same(resumed: Result, plain: Result) -> None:
    assert resumed.status == plain.status == "ok", (resumed.reason, plain.reason)
    assert torch.equal(resumed.draws.model_index, plain.draws.model_index)
    assert torch.equal(resumed.draws.theta, plain.draws.theta)
    assert torch.equal(resumed.model_probs.prob, plain.model_probs.prob)
    assert resumed.diagnostics["final_loss"] == plain.diagnostics["final_loss"]
    assert resumed.diagnostics["loss_trace"] == plain.diagnostics["loss_trace"]


def _assert_trace_continues(resumed: RunContext, plain: RunContext | None = None, minimum: int = 5) -> None:
    """No gaps or duplicates: iterations and seconds strictly increase, the same points as an uninterrupted run."""
    iterations = [snap.iteration for snap in resumed.snapshots]
    seconds = [snap.seconds for snap in resumed.snapshots]
    assert len(iterations) >= minimum
    assert all(a < b for a, b in itertools.pairwise(iterations)), iterations
    assert all(a < b for a, b in itertools.pairwise(seconds)), seconds
    if plain is not None:
        assert iterations == [snap.iteration for snap in plain.snapshots]
        assert resumed.counts == plain.counts
        for mine, theirs in zip(resumed.snapshots, plain.snapshots, strict=True):
            assert torch.equal(mine.estimate.model_probs.prob, theirs.estimate.model_probs.prob)
            assert mine.estimate.elbo == theirs.estimate.elbo


@pytest.mark.parametrize(
    ("name", "saves", "options"),
    [("vti-mcg", 15, {}), ("vti-surrogate", 30, {}), ("vti-mcg", 15, {"balance_models": True})],
)
def test_an_interrupted_training_resumes_to_the_uninterrupted_result(
    name: str, saves: int, options: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flow, optimiser, schedule, sampler state (running baseline, step counters), loss balance, generators and
    trace resume."""
    plain, plain_context = _run(name, None, **options)
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt", every_s=1e-9)  # a save after every iteration
    saved = _interrupt_after(monkeypatch, saves)
    with pytest.raises(_Interrupted):
        _run(name, slot, **options)
    assert saved[-1]["current"][1]["next_iteration"] == saves
    killed_points = [point["iteration"] for point in saved[-1]["context"]["points"]]
    assert killed_points and max(killed_points) <= saves  # the killed attempt had begun the trace
    monkeypatch.undo()
    resumed, context = _run(name, slot, **options)
    _assert_same(resumed, plain)
    _assert_trace_continues(context, plain_context)
    assert [snap.iteration for snap in context.snapshots][: len(killed_points)] == killed_points
    assert resumed.diagnostics["resumed_from"] == {"replicate": 0, "iteration": saves}
    assert context.clock.earlier_s > 0  # the killed attempt's seconds count
    assert context.snapshots[-1].seconds >= context.clock.earlier_s
    assert resumed.diagnostics["iterations_per_s"] > 0


# Saves with a long interval happen only at replicate ends, so the first one follows replicate 0. With a save after
# every iteration, replicate 0 makes 39 in-loop saves (none after its last iteration) and one at its end, so save 45
# is 5 iterations into replicate 1.
@pytest.mark.parametrize(("every_s", "saves", "iteration"), [(3600.0, 1, 0), (1e-9, OPTIONS["num_iterations"] + 5, 5)])
@pytest.mark.slow
def test_replicates_resume_with_the_finished_ones_kept(
    every_s: float, saves: int, iteration: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted right after replicate 0, or part way through replicate 1."""
    plain, plain_context = _run("vti-mcg", None, replicates=3)
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt", every_s=every_s)
    _interrupt_after(monkeypatch, saves)
    with pytest.raises(_Interrupted):
        _run("vti-mcg", slot, replicates=3)
    monkeypatch.undo()
    resumed, context = _run("vti-mcg", slot, replicates=3)
    _assert_same(resumed, plain)
    for key in ("replicate_terminal_losses", "replicate_chosen"):
        assert resumed.diagnostics[key] == plain.diagnostics[key]
    assert resumed.diagnostics["resumed_from"] == {"replicate": 1, "iteration": iteration}
    _assert_trace_continues(context, plain_context)
    assert context.snapshots[-1].iteration == 3 * OPTIONS["num_iterations"]


@pytest.mark.slow
def test_a_budgeted_run_resumes_its_trace_and_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed part way through a timed run: the resumed attempt keeps the calibrated horizon, the trace and seconds."""
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt", every_s=1e-9)
    saved = _interrupt_after(monkeypatch, 10)
    with pytest.raises(_Interrupted):
        _run("vti-mcg", slot, time_budget_s=6.0)
    killed = saved[-1]["context"]
    monkeypatch.undo()
    resumed, context = _run("vti-mcg", slot, time_budget_s=6.0)
    assert resumed.status == "ok", resumed.reason
    _assert_trace_continues(context, minimum=2)
    killed_points = [point["iteration"] for point in killed["points"]]
    assert [snap.iteration for snap in context.snapshots][: len(killed_points)] == killed_points
    if "horizon" in killed["counts"]:  # decided once, before the kill (unless the machine was slow to get there)
        assert context.counts["horizon"] == killed["counts"]["horizon"]
    assert context.clock.earlier_s == pytest.approx(killed["elapsed_s"])
    assert context.snapshots[-1].iteration == resumed.diagnostics["iterations"] == context.counts["stop"]


@pytest.mark.slow
def test_a_checkpoint_of_another_configuration_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt", every_s=1e-9)
    _interrupt_after(monkeypatch, 10)
    with pytest.raises(_Interrupted):
        _run("vti-mcg", slot, num_iterations=50)
    monkeypatch.undo()
    with pytest.warns(UserWarning, match="different configuration; starting afresh"):
        resumed, context = _run("vti-mcg", slot)
    _assert_same(resumed, _run("vti-mcg", None)[0])
    assert "resumed_from" not in resumed.diagnostics and context.clock.earlier_s == 0


def test_no_slot_no_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _run("vti-mcg", None)[0].status == "ok"
    assert list(tmp_path.iterdir()) == []
