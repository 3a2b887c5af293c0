"""suite.core.loop: the run's loop ends runs and phases by the preset or the budget, and takes the snapshots."""

import math

import pytest
import torch

from suite.core import loop as loop_module
from suite.core.context import RunContext
from suite.core.types import ModelProbs
from tests.fake_time import FakeTime

BUDGET_S = 10.0
STEP_S = 0.125  # exact in binary: the decisions fall at known iterations
STEPS_IN_BUDGET = round(BUDGET_S / STEP_S)  # 80


class FakeWallClock:
    """Stands in for the ``time`` module of suite.core.loop (checkpoint cadence is wall time)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def probs_at(iteration: int) -> ModelProbs:
    return ModelProbs.from_dense(torch.tensor([iteration, 1.0], dtype=torch.float64) / (iteration + 1))


def looped_run(context: RunContext, fake: FakeTime, planned: int | None = None) -> dict:
    """A burn-in phase ending at a quarter of the budget (or 25 iterations), then steps until the loop stops."""
    burn_in = None
    with context.loop("test", planned=planned) as loop:
        while not loop.finished():
            fake.now += STEP_S
            loop.advance()
            if burn_in is None and loop.reached("burn_in", 25, 0.25):
                burn_in = loop.iteration
            loop.maybe_snapshot(lambda it=loop.iteration: probs_at(it))
        loop.snapshot(lambda: probs_at(loop.iteration))
    return {"stop": loop.iteration, "burn_in": burn_in}


def hand_written_run(context: RunContext, fake: FakeTime) -> dict:
    """The same run written against the context's calls, as methods did before the loop."""
    iteration, burn_in = 0, None
    while not context.stop_due(iteration):
        iteration += 1
        fake.now += STEP_S
        if burn_in is None and context.milestone("burn_in", iteration, 0.25):
            burn_in = iteration
        context.maybe_snapshot(iteration, lambda it=iteration: probs_at(it))
    context.snapshot(iteration, lambda: probs_at(iteration))
    return {"stop": iteration, "burn_in": burn_in}


def test_without_a_budget_the_preset_lengths_decide() -> None:
    context = RunContext(seed=0)
    result = looped_run(context, FakeTime(), planned=200)
    assert result == {"stop": 200, "burn_in": 25}
    iterations = [snap.iteration for snap in context.snapshots]
    # The same points as the context places for 200 planned iterations, then the final one.
    expected = RunContext(seed=0)
    for iteration in range(1, 201):
        expected.maybe_snapshot(iteration, lambda: probs_at(0), 200)
    assert iterations == [snap.iteration for snap in expected.snapshots] + [200]


def test_with_a_budget_the_loop_makes_the_hand_written_decisions(fake_time: FakeTime) -> None:
    looped = RunContext(seed=0, time_budget_s=BUDGET_S)
    looped.clock.start()
    result = looped_run(looped, fake_time)
    fake_time.now = 1000.0
    written = RunContext(seed=0, time_budget_s=BUDGET_S)
    written.clock.start()
    assert result == hand_written_run(written, fake_time)
    assert result["stop"] == STEPS_IN_BUDGET and result["burn_in"] == STEPS_IN_BUDGET // 4
    assert looped.counts == written.counts
    assert [s.iteration for s in looped.snapshots] == [s.iteration for s in written.snapshots]


def test_a_replay_stops_at_the_recorded_counts_without_the_clock(fake_time: FakeTime) -> None:
    timed = RunContext(seed=0, time_budget_s=BUDGET_S)
    timed.clock.start()
    looped_run(timed, fake_time)
    replay = RunContext(seed=0, time_budget_s=BUDGET_S, replay=timed.counts)
    replay.clock.start()
    with replay.loop("replay") as loop:
        while not loop.finished():
            fake_time.now += 4 * STEP_S  # a slower machine: the counts decide
            loop.advance()
    assert loop.iteration == timed.counts["stop"] == STEPS_IN_BUDGET


def test_the_clock_is_read_only_when_the_method_is_ready_to_stop(fake_time: FakeTime) -> None:
    context = RunContext(seed=0, time_budget_s=BUDGET_S)
    context.clock.start()
    with context.loop("thinned") as loop:
        while not loop.finished(ready=loop.iteration % 7 == 0):
            fake_time.now += STEP_S
            loop.advance()
    # The budget is spent at iteration 80; the first whole interval of 7 after it ends at 84, recorded as the stop.
    assert loop.iteration == 84 and context.counts["stop"] == 84


def test_a_phase_of_length_or_fraction_zero_is_over_at_once(fake_time: FakeTime) -> None:
    unbudgeted = RunContext(seed=0).loop("a", planned=10)
    assert unbudgeted.reached("burn_in", 0, 0.5) and not unbudgeted.reached("burn_in", 1, 0.5)
    budgeted = RunContext(seed=0, time_budget_s=BUDGET_S)
    budgeted.clock.start()
    loop = budgeted.loop("b")
    assert loop.reached("burn_in", 100, 0.0)
    assert "burn_in" not in budgeted.counts  # nothing to record: no clock decision was made
    assert not loop.reached("burn_in", 0, 0.5)  # budgeted: the fraction decides, not the length


def test_plan_sets_the_run_length_once_a_first_phase_is_over() -> None:
    context = RunContext(seed=0)
    loop = context.loop("two phases")  # the first phase's length is not known in advance
    loop.advance(37)
    loop.plan(37 + 100)
    assert loop.planned == 137 and not loop.finished()
    loop.advance(100)
    assert loop.finished()
    budgeted = RunContext(seed=0, time_budget_s=BUDGET_S).loop("budgeted")
    budgeted.plan(500)
    assert budgeted.planned is None  # the clock decides


def test_advance_without_an_estimate_takes_no_snapshot() -> None:
    context = RunContext(seed=0)
    loop = context.loop("no estimate", planned=10)
    loop.advance(10)
    assert context.snapshots == [] and context.counts["snapshots"] == []
    with pytest.raises(ValueError, match="total_iterations"):
        RunContext(seed=0).loop("unplanned").advance(estimate=lambda: probs_at(1))


def test_checkpoints_fall_due_every_so_many_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    wall = FakeWallClock()
    monkeypatch.setattr(loop_module, "time", wall)
    loop = RunContext(seed=0).loop("checkpoints", planned=10)
    assert not loop.checkpoint_due(60.0)
    wall.now = 61.0
    assert loop.checkpoint_due(60.0) and not loop.checkpoint_due(60.0)  # the wait starts again
    wall.now = 1e9
    assert not loop.checkpoint_due(math.inf)  # no checkpoint slot: never
