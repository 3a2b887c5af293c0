"""rjmcmc-baseline and rjmcmc-naive on targets with exactly known model probabilities."""

import dataclasses
import math
from itertools import pairwise

import pytest
import torch

from methods.common.chains import ChainState
from methods.rjmcmc import baseline
from methods.rjmcmc.baseline import _KeptDraws
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.run.runner import execute, resolve_and_run
from suite.scoring.trace import score_trace

#: Options of a short run on robust-vs-p24 (2^24 models): counted over the kept models, not densely.
SPARSE = {"num_chains": 64, "burn_in": 40, "num_iterations": 60, "thin": 3}


@pytest.mark.slow
def test_baseline_recovers_sas_model_probabilities() -> None:
    # Issue acceptance check: P(k=2) = 0.75 within 0.01 with the quick profile and a fixed seed.
    result = resolve_and_run(make_method("rjmcmc-baseline"), make_problem("sas"), RunContext(seed=0, profile="quick"))
    p2 = result.model_probs.dense(2)[1].item()
    assert abs(p2 - 0.75) < 0.01
    # The reported standard error must be honest: the error is within 4 of them.
    assert abs(p2 - 0.75) < 4 * result.model_probs.se[1].item()
    assert result.diagnostics["accept_between"] > 0.02


@pytest.mark.slow
def test_baseline_recovers_gaussian_models(gaussian_models) -> None:
    method = make_method("rjmcmc-baseline", num_chains=1024, burn_in=500, num_iterations=2000, thin=10)
    result = resolve_and_run(method, gaussian_models, RunContext(seed=1, profile="quick"))
    truth = torch.tensor(gaussian_models.WEIGHTS, dtype=torch.float64)
    est = result.model_probs.dense(4)
    assert (est - truth).abs().max() < 0.01
    assert ((est - truth).abs() < 4.5 * result.model_probs.se).all()


def test_cross_entropy_density_is_close_to_the_target_entropy(gaussian_models) -> None:
    # Gaussian targets: the fitted density should reach H(pi) up to MC error and the small fit error.
    result = resolve_and_run(make_method("rjmcmc-baseline"), gaussian_models, RunContext(seed=2, profile="smoke"))
    draws = gaussian_models.reference_draws(20_000, torch.Generator().manual_seed(9))
    entropy = -gaussian_models.log_joint(draws.model_index, draws.theta).mean()
    cross = -result.log_density(draws.model_index, draws.theta).mean()
    assert cross >= entropy - 0.02  # Gibbs' inequality, up to MC error (sd of the difference ~ 0.005)
    # The Gaussian family contains the truth, so the gap is the fitting error: visit frequencies
    # off by ~0.01 and moments from ~25,000 correlated draws cost well under 0.05 nats.
    assert cross - entropy < 0.05


def test_naive_variant_uses_raw_coordinates() -> None:
    method = make_method("rjmcmc-naive")
    assert method.resolve(make_problem("sas"), "smoke").matching == "identity"
    # On sas the shared coordinate has disjoint supports across models, so raw jumps almost never pass.
    result = resolve_and_run(method, make_problem("sas"), RunContext(seed=0, profile="smoke"))
    assert result.diagnostics["accept_between"] < 0.01


@pytest.mark.parametrize(
    "bad",
    [
        {"num_chains": 0},
        {"thin": -1},
        {"aux_scale": 0.0},
        {"matching": "magic"},
        {"swap_jumps": -0.1},
        {"global_jumps": 0.8, "swap_jumps": 0.3},
    ],
)
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        make_method("rjmcmc-baseline", **bad).resolve(make_problem("sas"), "smoke")


def test_options_are_resolved_once_into_a_frozen_value() -> None:
    resolved = make_method("rjmcmc-baseline", thin=3).resolve(make_problem("sas"), "smoke")
    assert (resolved.num_chains, resolved.burn_in, resolved.num_iterations, resolved.thin) == (256, 200, 400, 3)
    assert resolved.burn_in_fraction == pytest.approx(1 / 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.num_chains = 1  # type: ignore[misc]


# ---------------------------------------------------------------------------------------- running estimates
def _same_probs(a, b) -> bool:
    return torch.equal(a.index, b.index) and torch.equal(a.prob, b.prob)


def test_snapshots_on_sas_end_at_the_result() -> None:
    context = RunContext(seed=0, profile="smoke")
    result = resolve_and_run(make_method("rjmcmc-baseline"), make_problem("sas"), context)
    snapshots = context.snapshots
    assert len(snapshots) >= 5
    seconds, iterations = [s.seconds for s in snapshots], [s.iteration for s in snapshots]
    assert all(b > a for a, b in pairwise(seconds))
    assert all(b > a for a, b in pairwise(iterations))
    assert iterations[-1] == 200 + 400  # burn-in and sampling, counted over the whole run
    assert _same_probs(snapshots[-1].estimate.model_probs, result.model_probs)


def test_burn_in_snapshots_are_the_chains_current_models() -> None:
    """Before burn-in ends a snapshot is the model frequencies of the 256 chains' current states."""
    context = RunContext(seed=0, profile="smoke")
    resolve_and_run(make_method("rjmcmc-baseline"), make_problem("sas"), context)
    early = [s for s in context.snapshots if s.iteration <= 200]
    assert len(early) >= 5
    for snap in early:
        counts = snap.estimate.model_probs.prob * 256
        assert torch.equal(counts, counts.round()) and snap.estimate.model_probs.total() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("name", "options"), [("sas", {}), ("robust-vs", {**SPARSE, "num_chains": 128}), ("robust-vs-p24", SPARSE)]
)
def test_running_frequencies_at_the_end_equal_the_reported_probabilities(name: str, options: dict) -> None:
    """Dense counts (sas, robust-vs) and the kept models of a space too large to count densely (robust-vs-p24)."""
    context = RunContext(seed=1, profile="smoke")
    result = resolve_and_run(make_method("rjmcmc-baseline", **options), make_problem(name), context)
    assert result.status == "ok"
    assert _same_probs(context.snapshots[-1].estimate.model_probs, result.model_probs)


# -------------------------------------------------------------------------------------------- time budgets
@pytest.mark.slow
def test_budgeted_run_stops_near_its_budget_and_replays_bitwise() -> None:
    problem, method = make_problem("sas"), make_method("rjmcmc-baseline")
    timed = RunContext(seed=3, profile="smoke", time_budget_s=2.0)
    result = resolve_and_run(method, problem, timed)
    assert result.status == "ok"
    assert timed.clock.elapsed() < 2.0 + 3.0  # generous: one iteration plus the density fit, on a busy machine
    counts = timed.counts
    assert 0 < counts["burn_in_end"] < counts["stop"]
    assert result.diagnostics["burn_in_iterations"] == counts["burn_in_end"]
    assert result.diagnostics["sampling_iterations"] == counts["stop"] - counts["burn_in_end"]
    assert result.diagnostics["sampling_iterations"] % 4 == 0  # stops after whole thinning intervals (thin 4)
    assert len(timed.snapshots) >= 5 and timed.snapshots[-1].iteration == counts["stop"]
    assert _same_probs(timed.snapshots[-1].estimate.model_probs, result.model_probs)

    replayed = RunContext(seed=3, profile="smoke", time_budget_s=2.0, replay=counts)
    again = resolve_and_run(method, problem, replayed)
    assert torch.equal(again.model_probs.prob, result.model_probs.prob)
    assert torch.equal(again.model_probs.se, result.model_probs.se)
    assert torch.equal(again.draws.model_index, result.draws.model_index)
    assert torch.equal(again.draws.theta, result.draws.theta)
    assert [s.iteration for s in replayed.snapshots] == [s.iteration for s in timed.snapshots]


@pytest.mark.slow
def test_budgeted_run_on_a_space_too_large_to_count_densely() -> None:
    """robust-vs-p24: the running estimate is the kept models so far, and the last one is the result."""
    context = RunContext(seed=0, profile="smoke", time_budget_s=1.5)
    result = resolve_and_run(make_method("rjmcmc-baseline", **SPARSE), make_problem("robust-vs-p24"), context)
    assert result.status == "ok" and result.diagnostics["sampling_iterations"] % SPARSE["thin"] == 0
    assert _same_probs(context.snapshots[-1].estimate.model_probs, result.model_probs)


def test_a_tiny_budget_is_a_failed_run_saying_so() -> None:
    """1e-4 s ends burn-in before its first iteration and leaves no iteration after it: no visit, no estimate."""
    problem = make_problem("sas")
    method = make_method("rjmcmc-baseline").resolve(problem, "smoke")
    record = execute(problem, method, RunContext(seed=0, profile="smoke", time_budget_s=1e-4))
    assert record["status"] == "failed"
    assert "time budget too small" in record["reason"] and "burn-in" in record["reason"]


def test_replayed_counts_must_say_where_burn_in_and_sampling_end() -> None:
    with pytest.raises(ValueError, match="'stop', 'burn_in_end'"):
        resolve_and_run(
            make_method("rjmcmc-baseline"), make_problem("sas"), RunContext(seed=0, replay={"snapshots": []})
        )


@pytest.mark.slow
def test_tv_trace_falls_on_sas() -> None:
    """The first point (1% of 3 s) comes a few dozen iterations of 1026 chains into burn-in, at most, on a CPU:
    the chains' current models are still far from pi (TV 0.05-0.7, and 0.75 x 1026 models is no whole number, so
    not 0 by chance even if they had mixed); the last is the visit frequencies of hundreds of thousands of
    chain-steps."""
    problem = make_problem("sas")
    method = make_method("rjmcmc-baseline", num_chains=1026).resolve(problem, "smoke")
    context = RunContext(seed=0, profile="smoke", time_budget_s=3.0)
    record = execute(problem, method, context)
    assert record["status"] == "ok"
    tv = score_trace(problem, context.snapshots)["metrics"]["model_prob_tv"]
    assert len(tv) >= 5 and tv[-1] < tv[0]
    assert record["trace"]["metrics"]["model_prob_tv"] == tv


def test_kept_draws_grow_and_then_thin_evenly() -> None:
    """A budgeted run's buffer doubles up to its cap, then drops every other row and doubles the thinning."""
    kept = _KeptDraws(rows=2, max_rows=8, thin=3, num_chains=2, dim=1)
    kept.allocate(torch.float64, torch.device("cpu"))
    sampled = 0
    for _ in range(100):
        sampled += 1
        if sampled % kept.thin == 0:
            kept.keep(ChainState(torch.full((2,), sampled), torch.full((2, 1), float(sampled)), torch.zeros(2)))
    # Rows stay every kept.thin-th iteration after burn-in, from the first one.
    assert kept.thin == 24 and len(kept) == 100 // 24  # halved at 24 (thin 6), 48 (thin 12) and 96 (thin 24)
    assert kept.models()[:, 0].tolist() == [24, 48, 72, 96]
    assert torch.equal(kept.theta()[:, 1, 0], kept.models()[:, 1].double())
    assert kept.models().shape[0] <= 8


def test_budgeted_run_past_the_kept_cap(monkeypatch) -> None:
    monkeypatch.setattr(baseline, "MAX_KEPT_VALUES", 64 * 2 * 8)  # 8 rows of 64 chains x 2 coordinates
    context = RunContext(seed=0, profile="smoke", time_budget_s=1.0)
    result = resolve_and_run(make_method("rjmcmc-baseline", num_chains=64, thin=2), make_problem("sas"), context)
    assert result.status == "ok"
    diagnostics = result.diagnostics
    assert diagnostics["thin_effective"] > 2 and diagnostics["num_kept_draws"] <= 64 * 8
    assert diagnostics["num_kept_draws"] == 64 * (diagnostics["sampling_iterations"] // diagnostics["thin_effective"])


# ------------------------------------------------------------------------------------- matching="auto"
def _sampler(problem, **options) -> baseline._Sampler:
    method = make_method("rjmcmc-baseline", **options).resolve(problem, "smoke")
    return baseline._Sampler(problem, method, RunContext(seed=4, profile="smoke"))


def test_auto_matching_trial_gives_odd_chains_the_identity_jump(gaussian_models) -> None:
    problem = gaussian_models
    sampler = _sampler(problem, matching="auto", aux_scale=0.5, num_chains=4)
    sampler._init_adaptation()
    sampler._set_jump_table(torch.full((4, 2), 3.0, dtype=torch.float64), torch.full((4, 2), 2.0, dtype=torch.float64))
    models = torch.tensor([3, 3, 1, 1])  # chains 1 and 3 are the identity ones; model 3 has 2 coordinates, 1 has 1
    loc, scale, log_det = sampler._standardiser(models, problem.mask(models))
    assert loc[:, 0].tolist() == [3.0, 0.0, 3.0, 0.0] and scale[:, 0].tolist() == [2.0, 0.5, 2.0, 0.5]
    expected = [2 * math.log(2.0), 2 * math.log(0.5), math.log(2.0), math.log(0.5)]
    assert log_det.tolist() == pytest.approx(expected)


def test_auto_matching_keeps_the_matching_accepted_more_often(gaussian_models) -> None:
    problem = gaussian_models
    sampler = _sampler(problem, matching="auto")
    sampler._init_adaptation()
    sampler.trial_counts = torch.tensor([[10.0, 100.0], [30.0, 100.0]], dtype=torch.float64)
    sampler._end_trial()
    assert sampler.matching_used == "identity" and not sampler.trial
    loc, scale, _ = sampler._standardiser(torch.arange(4), problem.mask(torch.arange(4)))
    assert torch.equal(loc, torch.zeros(4, 2, dtype=torch.float64))
    assert torch.equal(scale, torch.ones(4, 2, dtype=torch.float64))


def test_auto_matching_chooses_standardised_on_sas() -> None:
    # On sas raw jumps almost never pass (test_naive_variant_uses_raw_coordinates): the trial must see it.
    method = make_method("rjmcmc-baseline", matching="auto")
    result = resolve_and_run(method, make_problem("sas"), RunContext(seed=0, profile="smoke"))
    trial = result.diagnostics["matching_trial_accept"]
    assert result.diagnostics["matching_used"] == "standardised" and trial["identity"] < trial["standardised"]


# ------------------------------------------------------------------------------------- jump_memory
def _adapt_to(sampler: baseline._Sampler, models: torch.Tensor, value: float) -> None:
    theta = torch.full((len(models), 2), value, dtype=torch.float64)
    sampler._adapt(ChainState(models, theta, torch.zeros(len(models), dtype=torch.float64)))


@pytest.mark.parametrize("memory", [0.0, 0.9])
def test_the_jump_table_averages_the_states_of_past_adaptation_steps(gaussian_models, memory: float) -> None:
    """Two steps with every chain in model 3 at 1.0 and then 4.0: the table's mean is their decayed average.

    With one model visited, the pooled values are that model's own, so shrinking leaves them: the mean is
    (memory x 4 x 1.0 + 4 x 4.0) / (memory x 4 + 4) and the variance the decayed spread about it.
    """
    problem = gaussian_models
    sampler = _sampler(problem, matching="standardised", num_chains=4, jump_memory=memory)
    sampler._init_adaptation()
    models = torch.full((4,), 3)
    _adapt_to(sampler, models, 1.0)
    _adapt_to(sampler, models, 4.0)
    loc, scale, _ = sampler._standardiser(models[:1], problem.mask(models[:1]))
    mean = (memory * 1.0 + 4.0) / (memory + 1.0)
    var = (memory * 1.0 + 16.0) / (memory + 1.0) - mean * mean
    # Exact arithmetic up to float64 rounding (E[x^2] - mean^2 of numbers near 1-16): 1e-12 on the mean, 1e-9 on
    # the standard deviation. With memory 0 the variance is 0 and the table keeps its floor, sqrt(1e-12).
    assert loc[0].tolist() == pytest.approx([mean, mean], abs=1e-12)
    assert scale[0].tolist() == pytest.approx([math.sqrt(max(var, 1e-12))] * 2, abs=1e-9)


def test_jump_memory_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="jump_memory must lie in"):
        make_method("rjmcmc-baseline", jump_memory=1.0).resolve(make_problem("sas"), "smoke")
