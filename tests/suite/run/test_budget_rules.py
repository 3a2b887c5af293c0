"""Equal budgets are enforced: snapshots beyond 5% of a run's compute are charged to its clock, a run 3x over its
budget is marked over budget (in the record, the leaderboards and the page) and never starred, and the "at the
budget" value of such a run is the running estimate it had taken by the budget, never its final one.

The clock is a fake (``suite.core.context.time``), so that every number here is exact and no test depends on the
machine's speed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from problems.sas.problem import SinhArcsinh
from suite.core import budget
from suite.core.budget import TimeBudget, budget_allowance_s, is_over_budget
from suite.core.context import ComputeClock, RunContext, RunningEstimate
from suite.core.method import Method, Result
from suite.core.types import ModelProbs
from suite.report.html import render_page
from suite.report.leaderboard import display_table, long_table, summary_table, table_csv, to_markdown, trace_columns
from suite.report.readme_table import results_table
from suite.report.terminal import format_problem
from suite.results.records import over_budget
from suite.run.runner import execute
from suite.run.spec import GridSpec
from tests.fake_time import FakeTime

BUDGET = 2.0
STEP = 0.05  # fake seconds per iteration
SAS = SinhArcsinh()
TRUTH = SAS.reference_model_probs().prob


def _estimate(iteration: int) -> ModelProbs:
    """q(m) that approaches the truth as 1 / (1 + iteration / 10): later estimates are better."""
    weight = 1.0 / (1.0 + iteration / 10)
    return ModelProbs.from_dense((1 - weight) * TRUTH + weight * torch.tensor([1.0, 0.0], dtype=torch.float64))


class Stepping(Method):
    """Steps of STEP fake seconds with a snapshot at each due point; ``ignore_budget``: runs to 3x the budget;
    ``snapshot_cost``: fake seconds each running estimate costs while the clock is paused."""

    name = "stepping"

    def __init__(self, fake: FakeTime, ignore_budget: bool = False, snapshot_cost: float = 0.0) -> None:
        self.fake, self.ignore_budget, self.snapshot_cost = fake, ignore_budget, snapshot_cost

    def _running(self, iteration: int) -> RunningEstimate:
        self.fake.now += self.snapshot_cost
        return RunningEstimate(_estimate(iteration))

    def run(self, problem, context):
        iteration = 0
        while True:
            if self.ignore_budget:
                if context.clock.elapsed() >= 3 * BUDGET:
                    break
            elif context.stop_due(iteration):
                break
            self.fake.now += STEP
            iteration += 1
            context.maybe_snapshot(iteration, lambda i=iteration: self._running(i))
        final = _estimate(iteration)
        context.snapshot(iteration, lambda: final)
        return Result(model_probs=final, diagnostics={"iterations": iteration})


def _run(fake: FakeTime, **kwargs) -> dict:
    context = RunContext(seed=0, time_budget_s=BUDGET)
    record = execute(SAS, Stepping(fake, **kwargs), context)
    assert record["status"] == "ok", record["reason"]
    return record


def test_the_allowance_is_ten_percent_and_at_least_half_a_second() -> None:
    assert budget_allowance_s(20.0) == pytest.approx(2.0) and budget_allowance_s(2.0) == 0.5
    assert not is_over_budget(2.5, 2.0) and is_over_budget(2.51, 2.0)
    assert not is_over_budget(22.0, 20.0) and is_over_budget(22.01, 20.0)


def test_cheap_pauses_are_free_and_the_excess_of_heavy_ones_is_charged(fake_time: FakeTime) -> None:
    clock = ComputeClock(torch.device("cpu"))
    clock.start()
    fake_time.now += 10.0
    with clock.paused():
        fake_time.now += 0.4  # 4% of the 10 s of compute: free
    assert clock.elapsed() == pytest.approx(10.0) and clock.charged_s == 0.0
    with clock.paused():
        fake_time.now += 0.6  # 1.0 s paused in all, 0.5 s free (5% of 10 s): 0.5 s charged
    assert clock.charged_s == pytest.approx(0.5) and clock.elapsed() == pytest.approx(10.5)
    fake_time.now += 90.0  # more compute makes a larger free share, but a charge is never taken back
    assert clock.elapsed() == pytest.approx(100.5)


def test_a_well_behaved_run_is_within_budget(fake_time: FakeTime) -> None:
    record = _run(fake_time)
    budget = record["budget"]
    assert budget["over_budget"] is False and budget["allowance_s"] == 0.5
    assert BUDGET <= budget["clock_s"] <= BUDGET + STEP + 1e-9
    assert record["timings_s"]["snapshots_charged"] == 0.0
    assert not over_budget(record)


def test_a_run_three_times_over_its_budget_is_marked_in_its_record(fake_time: FakeTime) -> None:
    record = _run(fake_time, ignore_budget=True)
    assert record["budget"]["over_budget"] is True
    assert record["budget"]["clock_s"] == pytest.approx(3 * BUDGET, abs=STEP)
    assert over_budget(record)


def test_heavy_snapshots_are_charged_so_the_budget_stops_the_run_sooner(fake_time: FakeTime) -> None:
    honest = _run(fake_time)
    heavy = _run(fake_time, snapshot_cost=0.2)  # 24 due snapshots x 0.2 s: far above 5% of 2 s
    charged = heavy["timings_s"]["snapshots_charged"]
    assert charged > 0.5 and heavy["timings_s"]["snapshots"] > charged
    assert heavy["budget"]["over_budget"] is False  # the charge stopped it in time
    assert heavy["diagnostics"]["iterations"] < honest["diagnostics"]["iterations"] - charged / STEP + 2


def _leaderboard_records(fake: FakeTime) -> list[dict]:
    records = []
    for method, kwargs in (("honest", {}), ("late", {"ignore_budget": True})):
        for seed in (0, 1):
            record = _run(fake, **kwargs)
            record["method"], record["seed"] = method, seed
            records.append(record)
    return records


def test_the_leaderboard_scores_an_over_budget_run_at_the_budget_and_never_stars_it(
    fake_time: FakeTime, tmp_path: Path
) -> None:
    records = _leaderboard_records(fake_time)
    late = next(r for r in records if r["method"] == "late")
    honest = next(r for r in records if r["method"] == "honest")
    assert late["metrics"]["model_prob_tv"]["value"] < honest["metrics"]["model_prob_tv"]["value"]  # better at 3x

    columns, info = trace_columns(records, "sas")
    at_budget = info["at"][-1]
    seconds, values = late["trace"]["seconds"], late["trace"]["metrics"]["model_prob_tv"]
    by_budget = [v for t, v in zip(seconds, values, strict=True) if t <= BUDGET][-1]
    assert columns["late"][at_budget] == pytest.approx(by_budget)  # what it had by the budget
    assert columns["honest"][at_budget] == pytest.approx(honest["metrics"]["model_prob_tv"]["value"])
    assert columns["late"][at_budget] >= columns["honest"][at_budget]

    table = summary_table(long_table(records), "sas", records)
    assert list(table["method"]) == ["honest", "late"]
    assert dict(zip(table["method"], table["over_budget"], strict=True)) == {"honest": 0, "late": 2}
    assert list(display_table(table)["over_budget"]) == ["", "2/2"]
    assert "`honest` " in results_table(records) and "`late`" not in results_table(records)  # separated, worse

    page = render_page(records, tmp_path)
    row = page.split('data-problem="sas"', 1)[1].split("</tr>", 1)[0]
    late_cell = next(cell for cell in row.split("<td") if "sas / late" in cell)
    honest_cell = next(cell for cell in row.split("<td") if "sas / honest" in cell)
    assert "over budget" in late_cell and "&#9733;" not in late_cell
    assert "&#9733;" in honest_cell


def test_a_budget_is_checked_once_where_it_enters_and_carried_as_a_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """GridSpec makes the TimeBudget; the plan and the run context carry it on without checking it again."""
    spec = GridSpec(profile="quick", time_budget_s=8)
    assert (
        isinstance(spec.time_budget_s, TimeBudget) and spec.time_budget_s == 8.0 and repr(spec.time_budget_s) == "8.0"
    )
    checked: list[object] = []
    real_new = TimeBudget.__new__

    def counting_new(cls: type, value: object) -> TimeBudget:
        if not isinstance(value, TimeBudget):
            checked.append(value)
        return real_new(cls, value)

    monkeypatch.setattr(budget.TimeBudget, "__new__", counting_new)
    context = RunContext(seed=0, time_budget_s=spec.time_budget_s)
    assert context.time_budget_s is spec.time_budget_s and checked == []  # trusted, not checked again
    RunContext(seed=0, time_budget_s=3)  # a plain number (a context built by hand) is checked
    assert checked == [3]
    for bad in (0, -1, math.inf, True, "8", budget.MAX_TIME_BUDGET_S * 2):
        with pytest.raises(ValueError, match="time budget"):
            RunContext(seed=0, time_budget_s=bad)


def test_an_over_budget_run_shows_the_value_ranked_everywhere(fake_time: FakeTime, tmp_path: Path) -> None:
    """Terminal, CSV, Markdown, page and README table give the value at the budget, and the final one beside it."""
    records = [r for r in _leaderboard_records(fake_time) if r["method"] == "late"]
    at_budget = [
        [v for t, v in zip(r["trace"]["seconds"], r["trace"]["metrics"]["model_prob_tv"], strict=True) if t <= BUDGET][
            -1
        ]
        for r in records
    ]
    ranked = f"{sum(at_budget) / len(at_budget):.3g}"
    final = f"{sum(r['metrics']['model_prob_tv']['value'] for r in records) / len(records):.3g}"
    assert ranked != final
    table = summary_table(long_table(records), "sas", records)
    terminal = "\n".join(format_problem("sas", table))
    markdown = to_markdown(display_table(table))
    table_csv(table, tmp_path / "leaderboard.csv")
    csv = (tmp_path / "leaderboard.csv").read_text()
    page = render_page(records, tmp_path).split('data-problem="sas"', 1)[1].split("</tr>", 1)[0]
    readme = results_table(records)
    for name, text in (("terminal", terminal), ("markdown", markdown), ("page", page), ("readme", readme)):
        assert ranked in text, (name, ranked, text[:2000])
    assert f"(final {final})" in terminal and f"(final {final})" in markdown
    # ranked and final are printed to 3 significant digits: the CSV's full values agree to within 5e-3 relative.
    row = csv.splitlines()[1].split(",")
    header = csv.splitlines()[0].split(",")
    assert float(row[header.index("model_prob_tv")]) == pytest.approx(float(ranked), rel=5e-3)
    assert float(row[header.index("model_prob_tv_final")]) == pytest.approx(float(final), rel=5e-3)
