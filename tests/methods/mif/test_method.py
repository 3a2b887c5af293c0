"""Per-model VI methods: exact model probabilities, the refusal of large spaces, the suite's -ELBO."""

import math

import pytest
import torch

from suite.core.context import RunContext
from suite.core.method import Result
from suite.core.registry import make_method, make_problem
from suite.run.runner import negative_elbo, resolve_and_run

CPU = torch.device("cpu")


def test_importance_sampled_evidence_recovers_sas() -> None:
    """sas has exact model probabilities 1/4, 3/4; the IS weights' own standard error bounds the error.

    Only FR: a one-layer MIF or IAF is Gaussian in the first coordinate too, but its fit of the 2-D model
    leaves lighter tails than pi's there, and over seeds 0-3 its P(k=1) ranged 0.26-0.33 with standard
    errors that understate the error (the README says so). MIF's evidence is checked on the funnel.
    """
    name = "fr"
    method = make_method(name, num_iterations=300, batch_size=64, evidence_draws=20_000)
    result = resolve_and_run(method, make_problem("sas"), RunContext(seed=0, profile="smoke", num_draws=512))
    assert result.status == "ok"
    probs, se = result.model_probs.prob, result.model_probs.se
    assert float(probs.sum()) == pytest.approx(1.0)
    # 5 standard errors of the estimate plus a floor for the delta method's approximation.
    assert abs(float(probs[0]) - 0.25) < 5 * float(se[0]) + 0.005
    assert result.diagnostics["prior_inputs"] is False
    assert len(result.draws) == 512 and set(result.draws.model_index.tolist()) <= {0, 1}


def test_methods_refuse_spaces_too_large_to_enumerate() -> None:
    method = make_method("mif")
    problem = make_problem("linear-dag")
    reason = method.supports(problem)
    assert reason is not None and "max_models" in reason
    with pytest.raises(ValueError, match="cannot run"):
        resolve_and_run(method, problem, RunContext(seed=0, profile="smoke"))


def test_bad_options_fail_before_work() -> None:
    problem = make_problem("funnel")
    with pytest.raises(ValueError, match="valid: z, eps"):
        make_method("mif", conditioning="x").resolve(problem, "smoke")
    with pytest.raises(ValueError, match="learning_rates"):
        make_method("mf", learning_rates=(0.0,)).resolve(problem, "smoke")
    with pytest.raises(ValueError, match="valid: constant, cosine"):
        make_method("iaf", schedule="linear").resolve(problem, "smoke")


@pytest.mark.parametrize("name", ["mif", "mf", "fr", "fr-vip", "iaf"])
def test_every_profile_resolves_to_typed_options(name: str) -> None:
    """Only MIF has ``init``: the others' presets leave it out; learning rates become a tuple of floats."""
    problem = make_problem("sas")
    for profile in ("smoke", "quick", "paper"):
        resolved = make_method(name).resolve(problem, profile)
        assert isinstance(resolved.num_iterations, int) and isinstance(resolved.learning_rates, tuple)
        assert all(isinstance(rate, float) for rate in resolved.learning_rates)
    assert make_method(name, learning_rates=[1, 0.5]).resolve(problem, "smoke").learning_rates == (1.0, 0.5)


def test_negative_elbo_of_the_exact_posterior_is_minus_log_evidence() -> None:
    """With q = pi exactly, every term log q - log pi~ equals -log Z: the estimate is exact, its SE ~ 0."""
    problem = make_problem("eight-schools")
    log_z = problem.log_evidence()
    exact = Result(
        log_density=lambda m, theta: problem.log_joint(m, theta) - log_z,
        sample_q=lambda n, gen: problem.reference_draws(n, gen),
    )
    estimate = negative_elbo(problem, exact, CPU, torch.float64, num_draws=5000)
    assert estimate.value == pytest.approx(-log_z, abs=1e-9) and estimate.se < 1e-9


def test_negative_elbo_is_infinite_when_q_draws_overflow_or_leave_the_support() -> None:
    """A q draw with theta = -inf (an explosive affine flow, seen on eight schools) or log pi~ = -inf: -ELBO inf."""
    problem = make_problem("eight-schools")
    log_z = problem.log_evidence()

    def sample_q(n: int, gen: torch.Generator):
        draws = problem.reference_draws(n, gen)
        draws.theta[0, -1] = -math.inf  # log q there is NaN for a flow (inf - inf), log pi~ is -inf
        return draws

    def log_density(m: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        out = problem.log_joint(m, theta) - log_z
        return torch.where(torch.isfinite(theta).all(-1), out, math.nan)

    estimate = negative_elbo(problem, Result(log_density=log_density, sample_q=sample_q), CPU, torch.float64, 5000)
    assert estimate.value == math.inf and estimate.se is None


def test_mean_field_on_the_funnel_reaches_its_known_gap() -> None:
    """MF on the 10-D funnel: -ELBO = KL(q || pi) >= 0, and the paper's optimum is 1.86 nats."""
    method = make_method("mf", num_iterations=600, batch_size=64, evidence_draws=4096)
    problem = make_problem("funnel")
    result = resolve_and_run(method, problem, RunContext(seed=0, profile="smoke"))
    estimate = negative_elbo(problem, result, CPU, torch.float64, num_draws=20_000)
    assert estimate.value > 0 and abs(estimate.value - 1.86) < 0.1 + 5 * estimate.se


def _quick_neg_elbo(name: str, problem_name: str, seed: int = 0) -> float:
    """-ELBO (100,000 fresh draws) of a method at its quick-profile settings; checks its MC error is small.

    Where q can match the target exactly (MIF, FR-VIP on the funnel), the importance-sampled log Z must
    also agree with the truth within 4 of its standard errors (plus 0.005 for the delta method).
    """
    problem = make_problem(problem_name)
    result = resolve_and_run(make_method(name), problem, RunContext(seed=seed, profile="quick", num_draws=256))
    assert result.status == "ok", result.reason
    estimate = negative_elbo(problem, result, CPU, torch.float64)
    assert estimate.se is not None and estimate.se < 0.01
    if problem_name == "funnel" and name in ("mif", "fr-vip"):
        log_z, se = result.diagnostics["log_evidence"][0], result.diagnostics["log_evidence_se"][0]
        assert abs(log_z - problem.log_evidence()) < 4 * se + 0.005
    return estimate.value


@pytest.mark.slow
def test_quick_profile_orders_the_families_on_the_funnel() -> None:
    """Issue 6: MF > FR > FR-VIP >= MIF on the funnel. MF and FR share one optimum (1.86, the paper's tie),
    so between them only a tie within 0.03 nats is asserted; the others are separated by more than 10 SEs."""
    values = {name: _quick_neg_elbo(name, "funnel") for name in ("mf", "fr", "fr-vip", "mif")}
    assert abs(values["mf"] - 1.86) < 0.03 and abs(values["fr"] - 1.86) < 0.03
    assert values["fr"] - values["fr-vip"] > 1.5
    assert values["fr-vip"] >= values["mif"] >= 0.0
    assert values["mif"] < 0.1  # the paper's bar: within 0.1 of its 0.00


@pytest.mark.slow
def test_quick_mif_on_eight_schools_is_within_the_papers_bar() -> None:
    """Issue 6: MIF within 0.1 nats of the paper's 31.78, and above the exact -log Z = 31.26 (no q can go below)."""
    value = _quick_neg_elbo("mif", "eight-schools")
    assert -make_problem("eight-schools").log_evidence() < value < 31.78 + 0.1


def test_mif_says_when_a_problem_gives_no_prior_functions() -> None:
    result = resolve_and_run(make_method("mif"), make_problem("sas"), RunContext(seed=0, profile="smoke", num_draws=64))
    assert result.status == "ok" and result.diagnostics["prior_inputs"] is False
    assert "no prior location/scale" in result.diagnostics["prior_note"]
