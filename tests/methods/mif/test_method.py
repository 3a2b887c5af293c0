"""Per-model VI methods: exact model probabilities, the refusal of large spaces, the suite's -ELBO."""

import pytest
import torch

from suite.method import Budget, Result
from suite.registry import make_method, make_problem
from suite.runner import negative_elbo

CPU = torch.device("cpu")


@pytest.mark.parametrize("name", ["fr", "mif"])
def test_importance_sampled_evidence_recovers_sas(name: str) -> None:
    """sas has exact model probabilities 1/4, 3/4; the IS weights' own standard error bounds the error."""
    iterations = {"fr": 300, "mif": 1500}[name]  # IS needs q's tails to cover pi's: the flow needs a real fit
    method = make_method(
        name, num_iterations=iterations, batch_size=64, evidence_draws=20_000, hidden=8, progress=False
    )
    result = method.run(make_problem("sas"), Budget("smoke", num_draws=512), 0, CPU)
    assert result.status == "ok"
    probs, se = result.model_probs.prob, result.model_probs.se
    assert float(probs.sum()) == pytest.approx(1.0)
    # 5 standard errors of the estimate plus a floor for the delta method's approximation.
    assert abs(float(probs[0]) - 0.25) < 5 * float(se[0]) + 0.005
    assert result.diagnostics["prior_inputs"] is False
    if name == "mif":
        assert "no prior location/scale" in result.diagnostics["prior_note"]
    assert len(result.draws) == 512 and set(result.draws.model_index.tolist()) <= {0, 1}


def test_methods_refuse_spaces_too_large_to_enumerate() -> None:
    method = make_method("mif", progress=False)
    problem = make_problem("linear-dag")
    reason = method.supports(problem)
    assert reason is not None and "max_models" in reason
    with pytest.raises(ValueError, match="cannot run"):
        method.run(problem, Budget("smoke"), 0, CPU)


def test_bad_options_fail_before_work() -> None:
    problem = make_problem("funnel")
    with pytest.raises(ValueError, match="valid: z, eps"):
        make_method("mif", conditioning="x").settings(problem, Budget("smoke"))
    with pytest.raises(ValueError, match="learning_rates"):
        make_method("mf", learning_rates=(0.0,)).settings(problem, Budget("smoke"))


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


def test_mean_field_on_the_funnel_reaches_its_known_gap() -> None:
    """MF on the 10-D funnel: -ELBO = KL(q || pi) >= 0, and the paper's optimum is 1.86 nats."""
    method = make_method("mf", num_iterations=600, batch_size=64, evidence_draws=4096, progress=False)
    problem = make_problem("funnel")
    result = method.run(problem, Budget("smoke"), 0, CPU)
    estimate = negative_elbo(problem, result, CPU, torch.float64, num_draws=20_000)
    assert estimate.value > 0 and abs(estimate.value - 1.86) < 0.1 + 5 * estimate.se
