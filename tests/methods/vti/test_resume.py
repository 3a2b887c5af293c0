"""VTI runs interrupted part way continue from their checkpoint with exactly the result of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from suite import checkpoints as ckpt
from suite.method import RESUMED_TIMING, Budget, Result
from suite.registry import make_method, make_problem

CPU = torch.device("cpu")
OPTIONS = {"num_iterations": 40, "warmup_iterations": 10, "progress": False}


class _Interrupted(Exception):
    """Stands for the process being killed right after a save."""


def _run(name: str, slot: ckpt.CheckpointSlot | None, problem: str = "robust-vs", **options) -> Result:
    method = make_method(name, **{**OPTIONS, **options})
    with ckpt.checkpoint_slot(slot):
        return method.run(make_problem(problem), Budget("smoke", num_draws=64), 5, CPU)


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


@pytest.mark.parametrize(("name", "saves"), [("vti-mcg", 15), ("vti-surrogate", 30)])
def test_an_interrupted_training_resumes_to_the_uninterrupted_result(
    name: str, saves: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flow, optimiser, schedule, sampler state (running baseline, step counters) and generators all resume."""
    plain = _run(name, None)
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt", every_s=1e-9)  # a save after every iteration
    saved = _interrupt_after(monkeypatch, saves)
    with pytest.raises(_Interrupted):
        _run(name, slot)
    assert saved[-1]["current"][1]["next_iteration"] == saves
    monkeypatch.undo()
    resumed = _run(name, slot)
    _assert_same(resumed, plain)
    assert resumed.diagnostics["resumed_from"] == {"replicate": 0, "iteration": saves}
    assert resumed.timings[RESUMED_TIMING] > 0
    assert resumed.diagnostics["iterations_per_s"] > 0


# Saves with a long interval happen only at replicate ends, so the first one follows replicate 0. With a save after
# every iteration, replicate 0 makes 39 in-loop saves (none after its last iteration) and one at its end, so save 45
# is 5 iterations into replicate 1.
@pytest.mark.parametrize(("every_s", "saves", "iteration"), [(3600.0, 1, 0), (1e-9, OPTIONS["num_iterations"] + 5, 5)])
def test_replicates_resume_with_the_finished_ones_kept(
    every_s: float, saves: int, iteration: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted right after replicate 0, or part way through replicate 1."""
    plain = _run("vti-mcg", None, replicates=3)
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt", every_s=every_s)
    _interrupt_after(monkeypatch, saves)
    with pytest.raises(_Interrupted):
        _run("vti-mcg", slot, replicates=3)
    monkeypatch.undo()
    resumed = _run("vti-mcg", slot, replicates=3)
    _assert_same(resumed, plain)
    for key in ("replicate_terminal_losses", "replicate_chosen"):
        assert resumed.diagnostics[key] == plain.diagnostics[key]
    assert resumed.diagnostics["resumed_from"] == {"replicate": 1, "iteration": iteration}


def test_a_checkpoint_of_another_configuration_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slot = ckpt.CheckpointSlot(tmp_path / "run.pt", every_s=1e-9)
    _interrupt_after(monkeypatch, 10)
    with pytest.raises(_Interrupted):
        _run("vti-mcg", slot, num_iterations=50)
    monkeypatch.undo()
    with pytest.warns(UserWarning, match="different configuration; starting afresh"):
        resumed = _run("vti-mcg", slot)
    _assert_same(resumed, _run("vti-mcg", None))
    assert "resumed_from" not in resumed.diagnostics and RESUMED_TIMING not in resumed.timings


def test_no_slot_no_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _run("vti-mcg", None).status == "ok"
    assert list(tmp_path.iterdir()) == []
