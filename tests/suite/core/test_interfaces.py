"""Conformance: every registered problem and method must pass these (new ones get them for free)."""

import itertools
import math

import pytest
import torch

from suite.core.context import RunContext
from suite.core.method import Result
from suite.core.problem import Problem
from suite.core.registry import available_methods, available_problems, make_method, make_problem, problem_class
from suite.run.runner import execute, gold_draws, resolve_and_run

PROBLEMS = list(available_problems())
METHODS = list(available_methods())
#: Problems every method is run on here: those of the smoke profile (the large sweep instances are left out).
SMOKE_PROBLEMS = [name for name in PROBLEMS if "smoke" in problem_class(name).planned_in]


def _problem(name: str):
    problem = make_problem(name)
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    return problem


def _some_models(problem, n: int, gen: torch.Generator) -> torch.Tensor:
    return problem.model_space.sample_uniform(n, gen)


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_shapes_and_dtypes(name: str) -> None:
    problem, gen = _problem(name), torch.Generator().manual_seed(0)
    m = _some_models(problem, 64, gen)
    theta = torch.randn(64, problem.dim_max, dtype=torch.float64, generator=gen)
    mask = problem.mask(m)
    assert mask.dtype == torch.bool and mask.shape == (64, problem.dim_max)
    assert problem.log_joint(m, theta).shape == (64,)
    assert problem.log_joint(m, theta).dtype == torch.float64
    assert problem.log_joint(m, theta.float()).dtype == torch.float32
    assert problem.log_model_prior(m).shape == (64,)
    assert problem.context(m).shape == (64, problem.context_dim)


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_ignores_inactive_coordinates(name: str) -> None:
    problem, gen = _problem(name), torch.Generator().manual_seed(1)
    m = _some_models(problem, 128, gen)
    theta = torch.randn(128, problem.dim_max, dtype=torch.float64, generator=gen)
    garbage = torch.where(problem.mask(m), theta, torch.full_like(theta, math.nan))
    torch.testing.assert_close(problem.log_joint(m, garbage), problem.log_joint(m, theta))


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_batch_rows_are_independent(name: str) -> None:
    problem, gen = _problem(name), torch.Generator().manual_seed(2)
    m = _some_models(problem, 16, gen)
    theta = torch.randn(16, problem.dim_max, dtype=torch.float64, generator=gen)
    batched = problem.log_joint(m, theta)
    single = torch.cat([problem.log_joint(m[i : i + 1], theta[i : i + 1]) for i in range(16)])
    torch.testing.assert_close(batched, single, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_float32_agrees_with_float64(name: str) -> None:
    problem, gen = _problem(name), torch.Generator().manual_seed(3)
    draws = problem.reference_draws(256, gen)
    if draws is None:
        pytest.skip("no reference draws")
    if getattr(problem, "float32_note", None):
        pytest.skip(problem.float32_note)
    lp64 = problem.log_joint(draws.model_index, draws.theta)
    lp32 = problem.log_joint(draws.model_index, draws.theta.float())
    # float32 carries ~6e-8 relative error per operation; log joints of magnitude up to ~1e3 summed
    # over tens of terms lose ~1e-4 absolute, so this bound catches dtype bugs, not rounding.
    torch.testing.assert_close(lp32.double(), lp64, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_model_space(name: str) -> None:
    problem = _problem(name)
    space = problem.model_space
    if space.num_models is None:
        pytest.skip("not enumerable")
    sample = range(min(space.num_models, 64))
    assert [space.index(space.identifier(i)) for i in sample] == list(sample)
    if space.num_models <= 2**16:
        prior = problem.log_model_prior(space.all_indices())
        assert torch.logsumexp(prior, 0).item() == pytest.approx(0.0, abs=1e-10)


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_ground_truth_is_consistent(name: str) -> None:
    problem = _problem(name)
    truth = problem.reference_model_probs()
    if truth is not None and problem.num_models is not None:
        assert truth.total() == pytest.approx(1.0, abs=1e-9)
    draws = gold_draws(problem, 40_000)
    if draws is None:
        pytest.skip("no reference draws")
    assert draws.theta.dtype == torch.float64
    assert (draws.theta[~problem.mask(draws.model_index)] == 0).all()
    assert torch.isfinite(problem.log_joint(draws.model_index, draws.theta)).all()
    if truth is not None:
        # Binomial checks need expected counts well above 1: models expecting >= 20 draws are checked
        # one by one, all rarer models pooled into one cell (4.5 standard errors each).
        n = len(draws)
        freq = torch.bincount(draws.model_index, minlength=problem.num_models).double() / n
        p = truth.dense(problem.num_models)
        common = p * n >= 20
        cells_p = torch.cat([p[common], p[~common].sum(0, keepdim=True)])
        cells_f = torch.cat([freq[common], freq[~common].sum(0, keepdim=True)])
        se = (cells_p * (1 - cells_p) / n).sqrt()
        assert ((cells_f - cells_p).abs() <= 4.5 * se + 1e-12).all()


@pytest.mark.parametrize("method_name", METHODS)
@pytest.mark.parametrize("name", PROBLEMS)
def test_methods_say_why_they_do_not_apply(method_name: str, name: str) -> None:
    """Every (method, problem) pair either applies or gives a reason, before any work (never a crash)."""
    reason = make_method(method_name).supports(make_problem(name))
    assert reason is None or (isinstance(reason, str) and reason.strip())


def test_per_model_methods_are_not_applicable_to_spaces_too_large_to_enumerate() -> None:
    """A 2^24-model space: per-model fits and per-model-flow TRJ say why they cannot run; VTI with MADE can."""
    problem = make_problem("robust-vs-p24")
    for name in ("mif", "iaf", "fr-vip", "fr", "mf"):
        assert make_method(name).supports(problem)
    assert make_method("vti-mcg").supports(problem) is None


@pytest.mark.parametrize("method_name", METHODS)
@pytest.mark.parametrize("name", SMOKE_PROBLEMS)
def test_method_returns_a_valid_result(method_name: str, name: str) -> None:
    problem, method = _problem(name), make_method(method_name)
    if method.supports(problem):
        pytest.skip(method.supports(problem))
    context = RunContext(seed=0, profile="smoke", num_draws=500)
    result = resolve_and_run(method, problem, context)
    assert isinstance(result, Result) and result.status == "ok", result.reason
    if result.model_probs is not None:
        probs = result.model_probs
        assert (probs.prob >= 0).all() and probs.total() <= 1 + 1e-9
        if problem.num_models is not None:
            assert probs.total() == pytest.approx(1.0, abs=1e-9)
            assert (probs.index < problem.num_models).all()
    if result.draws is not None:
        assert result.draws.theta.shape == (len(result.draws), problem.dim_max) and len(result.draws) <= 500
    if result.log_density is not None:
        lq = result.log_density(result.draws.model_index, result.draws.theta)
        assert lq.shape == (len(result.draws),) and torch.isfinite(lq).all()
    timings = {**context.timer.timings, **result.timings}
    assert timings and all(t >= 0 for t in timings.values())


def _first_supported_problem(method_name: str) -> Problem:
    """``sas`` when the method runs on it, else the first small problem it supports (e.g. a DAG for dagma)."""
    method = make_method(method_name)
    for name in ("sas", "linear-dag-d4", "eight-schools"):
        problem = make_problem(name)
        if method.supports(problem) is None:
            return problem
    raise AssertionError(f"{method_name} supports none of the small problems")


@pytest.mark.parametrize("method_name", METHODS)
def test_method_is_reproducible_by_seed(method_name: str) -> None:
    problem, method = _first_supported_problem(method_name), make_method(method_name)
    runs = [resolve_and_run(method, problem, RunContext(seed=s, profile="smoke", num_draws=200)) for s in (5, 5, 6)]
    if runs[0].draws is None:  # a collapsed sampler (order-mcmc) returns q(m) only
        assert torch.equal(runs[0].model_probs.prob, runs[1].model_probs.prob)
        assert not torch.equal(runs[0].model_probs.prob, runs[2].model_probs.prob)
        return
    assert torch.equal(runs[0].draws.model_index, runs[1].draws.model_index)
    assert torch.equal(runs[0].draws.theta, runs[1].draws.theta)
    if runs[0].metrics_scope == "all":  # a point estimate (one graph) may well be the same for two seeds
        assert not torch.equal(runs[0].draws.theta, runs[2].draws.theta)


@pytest.mark.parametrize("method_name", METHODS)
def test_method_runs_through_the_harness(method_name: str) -> None:
    problem = _first_supported_problem(method_name)
    method = make_method(method_name).resolve(problem, "smoke")
    record = execute(problem, method, RunContext(seed=0, profile="smoke"), gold_draws(problem, 1000))
    assert record["status"] == "ok", record["reason"]
    assert record["method_settings"] and record["environment"]["dtype"] == "float64"


@pytest.mark.parametrize("method_name", METHODS)
def test_method_traces_its_running_estimate(method_name: str) -> None:
    """At least 5 snapshots at increasing times and iterations, the last one equal to the result (issue 19)."""
    problem = _first_supported_problem(method_name)
    context = RunContext(seed=0, profile="smoke", num_draws=200)
    result = resolve_and_run(make_method(method_name), problem, context)
    assert result.status == "ok", result.reason
    snapshots = context.snapshots
    assert len(snapshots) >= 5
    seconds = [snap.seconds for snap in snapshots]
    iterations = [snap.iteration for snap in snapshots]
    assert all(b > a for a, b in itertools.pairwise(seconds)), seconds
    assert all(b > a for a, b in itertools.pairwise(iterations)), iterations
    last = snapshots[-1].estimate.model_probs
    assert last is not None and result.model_probs is not None
    assert torch.equal(last.index, result.model_probs.index)
    assert torch.equal(last.prob, result.model_probs.prob.to(torch.float64))


@pytest.mark.parametrize("name", PROBLEMS)
def test_problem_log_joint_agrees_between_torch_and_jax(name: str) -> None:
    """One definition, two backends: float64 results agree to 1e-10 (plus 1e-12 relative for large values)."""
    import jax.numpy as jnp
    import numpy as np

    from suite.core.backend import jax_backend

    xp = jax_backend()  # enable float64 before any JAX array is made
    problem, gen = _problem(name), torch.Generator().manual_seed(4)
    if type(problem).log_joint_with is Problem.log_joint_with:
        pytest.skip("a torch-only log joint: its ground truth is exact, so the reference engine never needs it")
    inputs = []
    draws = problem.reference_draws(1000, gen)
    if draws is not None:
        inputs.append((draws.model_index, draws.theta))
    m = _some_models(problem, 1000, gen)
    inputs.append((m, torch.randn(1000, problem.dim_max, dtype=torch.float64, generator=gen)))
    for model_index, theta in inputs:
        expected = problem.log_joint(model_index, theta).numpy()
        got = problem.log_joint_with(xp, jnp.asarray(model_index.numpy()), jnp.asarray(theta.numpy()))
        assert np.asarray(got).dtype == np.float64
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-10)
