"""suite.core.context: snapshot points, clock decisions recorded and replayed, paused snapshots, checkpoints."""

import io
import itertools
import math

import pytest
import torch

from suite.core import context as context_module
from suite.core.context import (
    FIRST_POINT,
    SNAPSHOT_POINTS,
    ComputeClock,
    RunContext,
    RunningEstimate,
    snapshot_fractions,
)
from suite.core.types import ModelProbs
from tests.fake_time import FakeTime

BUDGET_S = 10.0
STEP_S = 0.125  # exact in binary: the fake clock's sums are exact, so the decisions fall at known iterations
STEPS_IN_BUDGET = round(BUDGET_S / STEP_S)  # 80


def probs_at(iteration: int) -> ModelProbs:
    return ModelProbs.from_dense(torch.tensor([iteration, 1.0], dtype=torch.float64) / (iteration + 1))


def timed_loop(context: RunContext, fake: FakeTime, step_s: float, start: int = 0) -> dict:
    """A method's main loop: burn-in milestone, one projection, snapshots, stop at the budget, a final snapshot."""
    iteration = start
    burn_in = None
    projected = None
    while not context.stop_due(iteration):
        iteration += 1
        fake.now += step_s
        if burn_in is None and context.milestone("burn_in", iteration, 0.25):
            burn_in = iteration
        if iteration == 5:
            projected = context.projected_iterations("length", iteration)
        context.maybe_snapshot(iteration, lambda it=iteration: probs_at(it))
    context.snapshot(iteration, lambda: probs_at(iteration))
    return {"stop": iteration, "burn_in": burn_in, "projected": projected}


# ------------------------------------------------------------------ snapshot points
def test_snapshot_fractions_are_geometric_from_the_first_point_to_the_end() -> None:
    fractions = snapshot_fractions()
    assert len(fractions) == SNAPSHOT_POINTS
    assert fractions[0] == pytest.approx(FIRST_POINT) and fractions[-1] == 1.0
    ratios = [b / a for a, b in itertools.pairwise(fractions)]
    assert ratios == pytest.approx([(1 / FIRST_POINT) ** (1 / (SNAPSHOT_POINTS - 1))] * len(ratios))
    assert snapshot_fractions(3, 0.25) == pytest.approx([0.25, 0.5, 1.0])


def test_without_a_budget_snapshots_fall_at_fractions_of_the_planned_iterations() -> None:
    context = RunContext(seed=0)
    total = 1000
    due = [i for i in range(1, total + 1) if context.snapshot_due(i, total)]
    expected = sorted({math.ceil(round(f * total, 9)) for f in snapshot_fractions()[:-1]})
    assert due == expected and due[0] == 10 and due[-1] < total  # the end is the method's own final snapshot
    assert context.counts["snapshots"] == due
    with pytest.raises(ValueError, match="total_iterations"):
        RunContext(seed=0).snapshot_due(1)


def test_snapshots_are_moved_to_cpu_float64_trimmed_and_the_final_call_replaces_a_due_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(context_module, "MAX_SNAPSHOT_MODELS", 2)
    context = RunContext(seed=0)
    context.clock.start()
    context.snapshot(1, lambda: None)  # no estimate yet: no point
    assert context.snapshots == []
    probs = ModelProbs(torch.tensor([4, 5, 6]), torch.tensor([0.2, 0.5, 0.3], dtype=torch.float32))
    context.snapshot(2, lambda: RunningEstimate(probs, elbo=torch.tensor(-3.5)))
    (point,) = context.snapshots
    assert point.estimate.model_probs.prob.dtype == torch.float64 and point.estimate.elbo == -3.5
    assert sorted(point.estimate.model_probs.index.tolist()) == [5, 6]  # the two most probable
    context.snapshot(2, lambda: probs_at(2))
    assert len(context.snapshots) == 1 and torch.equal(context.snapshots[0].estimate.model_probs.index, torch.arange(2))


# ------------------------------------------------------------------ the clock and the budget
def test_snapshot_pauses_the_clock(fake_time: FakeTime) -> None:
    context = RunContext(seed=0)
    context.clock.start()

    def estimate() -> ModelProbs:
        fake_time.now += 0.08  # 4% of the 2 s of compute so far: within the free share
        return probs_at(7)

    with context.timer.phase("train"):
        fake_time.now += 2.0
        context.snapshot(7, estimate)
        fake_time.now += 1.0
    assert context.snapshots[0].seconds == 2.0
    assert context.clock.elapsed() == pytest.approx(3.0) and context.clock.paused_s == pytest.approx(0.08)
    assert context.clock.charged_s == 0.0 and context.timer.timings["train"] == pytest.approx(3.0)


def test_a_slow_estimate_is_charged_beyond_the_free_share(fake_time: FakeTime) -> None:
    """A snapshot's seconds beyond 5% of the method's compute count on the clock: the budget stops the run sooner."""
    context = RunContext(seed=0, time_budget_s=BUDGET_S)
    context.clock.start()

    def slow_estimate() -> ModelProbs:
        fake_time.now += 0.5 * BUDGET_S
        return probs_at(1)

    fake_time.now += 0.011 * BUDGET_S  # past the first point only
    assert context.maybe_snapshot(1, slow_estimate)
    charged = 0.5 * BUDGET_S - 0.05 * 0.011 * BUDGET_S
    assert context.clock.charged_s == pytest.approx(charged)
    assert context.remaining_s() == pytest.approx(0.989 * BUDGET_S - charged)
    with context.timer.phase("train"):
        fake_time.now += 0.5 * BUDGET_S
    assert context.stop_due(2) and context.timer.timings["train"] == pytest.approx(0.5 * BUDGET_S)


def test_budget_decisions_are_recorded_as_counts(fake_time: FakeTime) -> None:
    context = RunContext(seed=0, time_budget_s=BUDGET_S)
    context.clock.start()
    run = timed_loop(context, fake_time, STEP_S)
    assert run == {"stop": STEPS_IN_BUDGET, "burn_in": STEPS_IN_BUDGET // 4, "projected": STEPS_IN_BUDGET}
    counts = context.counts
    assert counts["stop"] == STEPS_IN_BUDGET and counts["burn_in"] == STEPS_IN_BUDGET // 4
    assert counts["length"] == STEPS_IN_BUDGET
    iterations = [s.iteration for s in context.snapshots]
    assert iterations == [*counts["snapshots"], STEPS_IN_BUDGET]
    assert 5 <= len(iterations) <= SNAPSHOT_POINTS and iterations == sorted(set(iterations))
    assert context.milestone("burn_in", STEPS_IN_BUDGET // 4 + 1, 0.25)  # once reached it stays reached
    assert not context.milestone("burn_in", STEPS_IN_BUDGET // 4 - 1, 0.25)  # ... from its iteration on


def test_a_replay_makes_the_same_decisions_without_the_clock(fake_time: FakeTime) -> None:
    timed = RunContext(seed=0, time_budget_s=BUDGET_S)
    timed.clock.start()
    run = timed_loop(timed, fake_time, STEP_S)
    # The replaying machine is 4x slower (and then 10x faster): the counts decide, not its clock.
    for step_s in (4 * STEP_S, STEP_S / 10):
        replay = RunContext(seed=0, time_budget_s=BUDGET_S, replay=timed.counts)
        replay.clock.start()
        assert timed_loop(replay, fake_time, step_s) == run
        assert [s.iteration for s in replay.snapshots] == [s.iteration for s in timed.snapshots]
        assert replay.counts["snapshots"] == timed.counts["snapshots"]


def test_a_replay_without_a_recorded_projection_is_refused() -> None:
    context = RunContext(seed=0, replay={"snapshots": [], "stop": 3})
    assert context.budgeted and not context.stop_due(2) and context.stop_due(3)
    assert not context.milestone("never_reached", 10**6, 0.5)
    with pytest.raises(ValueError, match="'length'"):
        context.projected_iterations("length", 5)


def test_a_replayed_run_records_the_counts_it_replayed(fake_time: FakeTime) -> None:
    timed = RunContext(seed=0, time_budget_s=BUDGET_S)
    timed.clock.start()
    timed_loop(timed, fake_time, STEP_S)
    replay = RunContext(seed=0, time_budget_s=BUDGET_S, replay=timed.counts)
    replay.clock.start()
    timed_loop(replay, fake_time, STEP_S)
    assert replay.counts == timed.counts


def test_without_a_budget_there_are_no_milestones_projections_or_stop() -> None:
    context = RunContext(seed=0)
    assert not context.budgeted and not context.stop_due(10**9) and context.remaining_s() == math.inf
    with pytest.raises(ValueError, match="without a time budget"):
        context.milestone("burn_in", 1, 0.5)
    with pytest.raises(ValueError, match="without a time budget"):
        context.projected_iterations("length", 1)
    for fraction in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            RunContext(seed=0, time_budget_s=1.0).milestone("burn_in", 1, fraction)


@pytest.mark.parametrize("budget", [0.0, -1.0, math.nan, math.inf, -math.inf])
def test_a_non_positive_or_non_finite_budget_is_refused(budget: float) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        RunContext(seed=0, time_budget_s=budget)


def test_earlier_seconds_must_be_finite_and_non_negative() -> None:
    clock = ComputeClock(torch.device("cpu"))
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="earlier seconds"):
            clock.add_earlier(bad)
    clock.add_earlier(2.5)
    assert clock.elapsed() == 2.5  # not started: only the earlier attempts


# ------------------------------------------------------------------ checkpoints
def test_a_resumed_run_continues_its_trace_and_adds_the_earlier_seconds(fake_time: FakeTime) -> None:
    uninterrupted = RunContext(seed=0, time_budget_s=BUDGET_S)
    uninterrupted.clock.start()
    run = timed_loop(uninterrupted, fake_time, STEP_S)

    first = RunContext(seed=0, time_budget_s=BUDGET_S)
    first.clock.start()
    killed_at = STEPS_IN_BUDGET // 2
    for iteration in range(1, killed_at + 1):
        fake_time.now += STEP_S
        first.milestone("burn_in", iteration, 0.25)
        if iteration == 5:
            first.projected_iterations("length", iteration)
        first.maybe_snapshot(iteration, lambda it=iteration: probs_at(it))
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)  # a weights-only checkpoint value
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)

    fake_time.now += 1000.0  # the run is down for a while: not compute time
    second = RunContext(seed=0, time_budget_s=BUDGET_S)
    second.clock.start()
    second.load_state_dict(state)
    assert second.clock.elapsed() == killed_at * STEP_S
    resumed = timed_loop(second, fake_time, STEP_S, start=killed_at)
    assert resumed["stop"] == run["stop"] and second.counts == uninterrupted.counts
    assert [s.iteration for s in second.snapshots] == [s.iteration for s in uninterrupted.snapshots]
    assert [s.seconds for s in second.snapshots] == [s.seconds for s in uninterrupted.snapshots]
    for ours, theirs in zip(second.snapshots, uninterrupted.snapshots, strict=True):
        assert torch.equal(ours.estimate.model_probs.prob, theirs.estimate.model_probs.prob)
    assert second.clock.elapsed() == STEPS_IN_BUDGET * STEP_S
