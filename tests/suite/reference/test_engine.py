"""The whole engine on problems with exact answers."""

import numpy as np
import pytest
import torch

from suite.core.registry import make_problem
from suite.reference.engine import EngineSettings, QuadratureEvidence, estimate_reference, model_prob_se
from suite.reference.nuts import NUTSSettings
from suite.reference.smc import SMCSettings


def test_model_prob_se_matches_simulation() -> None:
    """Delta-method SEs of p = softmax(log Z) against perturbing log Z by its SEs (small errors)."""
    log_z, se = np.log([0.2, 0.5, 0.3]), np.array([0.02, 0.01, 0.03])
    prob = np.exp(log_z) / np.exp(log_z).sum()
    noise = np.random.default_rng(0).standard_normal((200_000, 3)) * se
    sims = np.exp(log_z + noise)
    sims /= sims.sum(1, keepdims=True)
    np.testing.assert_allclose(model_prob_se(prob, se), sims.std(0), rtol=0.02)


@pytest.mark.slow
def test_engine_recovers_sas_model_probabilities() -> None:
    """sas has no prior: NUTS, Student-t starts, SMC; p = (1/4, 3/4) within 4 reported SEs (+0.01)."""
    problem = make_problem("sas")
    settings = EngineSettings(
        smc=SMCSettings(num_particles=500, num_runs=6),
        nuts=NUTSSettings(num_chains=4, num_warmup=300, num_samples=300),
        num_gold_draws=1000,
    )
    reference = estimate_reference(problem, settings, log=lambda *_: None)
    assert np.all(np.abs(reference.prob - [0.25, 0.75]) <= 4 * reference.prob_se + 0.01)
    assert reference.provenance["smc_initial"].startswith("student-t")
    draws = reference.draws(1000, torch.Generator().manual_seed(0))
    assert len(draws) == 1000 and torch.isfinite(problem.log_joint(draws.model_index, draws.theta)).all()
    assert (draws.theta[~problem.mask(draws.model_index)] == 0).all()
    freq = torch.bincount(draws.model_index, minlength=2).double() / 1000
    assert abs(float(freq[0]) - reference.prob[0]) < 4.5 * np.sqrt(0.25 * 0.75 / 1000)


def test_copies_of_a_resampled_draw_stay_in_one_half() -> None:
    """Gold draws with repeats (resampled SMC particles): a permutation, and no draw in both halves but one group."""
    from suite.reference.engine import order_keeping_copies_together

    gen = np.random.default_rng(0)
    distinct = gen.normal(size=(300, 3))
    copies = gen.integers(0, 300, size=1000)  # every particle repeated a random number of times
    theta = distinct[copies]
    model_index = (copies % 2).astype(np.int64)
    order = order_keeping_copies_together(model_index, theta, torch.Generator().manual_seed(1))
    assert sorted(order.tolist()) == list(range(1000))
    test, train = copies[order[:500]], copies[order[500:]]
    assert len(set(test.tolist()) & set(train.tolist())) <= 1  # only a group the boundary cuts
    # The groups come in random order, not sorted by value.
    assert not np.all(np.diff(theta[order][:, 0]) >= 0)


def test_even_subset_thins_evenly() -> None:
    from suite.reference.engine import even_subset

    rows = np.arange(10)[:, None]
    assert even_subset(rows, 4)[:, 0].tolist() == [0, 3, 6, 9]
    assert len(even_subset(rows, 20)) == 10


@pytest.mark.slow
def test_quadrature_evidence_gives_the_exact_probabilities_and_smc_the_draws() -> None:
    """evidence "quadrature": p(m | D) from the problem's deterministic evidences; gold draws still SMC's."""
    problem = make_problem("conjugate-vs", num_covariates=2)

    class WithQuadrature(type(problem)):
        """conjugate-vs whose closed-form evidences stand in for a quadrature (error bound 1e-9)."""

        def quadrature_log_evidences(self) -> tuple[torch.Tensor, torch.Tensor]:
            log_evidence = self.log_evidence()
            return log_evidence, torch.full_like(log_evidence, 1e-9)

    quadrature = WithQuadrature(num_covariates=2)
    assert isinstance(quadrature, QuadratureEvidence) and not isinstance(problem, QuadratureEvidence)
    settings = EngineSettings(smc=SMCSettings(num_particles=300, num_runs=4), num_gold_draws=800, evidence="quadrature")
    assert settings.as_dict()["evidence"] == "quadrature" and "bridge" not in settings.as_dict()
    reference = estimate_reference(quadrature, settings, log=lambda *_: None)
    exact = problem.reference_model_probs().dense(problem.num_models).numpy()
    np.testing.assert_allclose(reference.prob, exact, rtol=1e-12)
    assert reference.provenance["evidence_used"] == "quadrature" and reference.prob_se.max() < 1e-8
    assert reference.provenance["method"] == "quadrature-evidence+nuts-draws"
    assert len(reference.provenance["log_z_smc"]) == problem.num_models  # SMC's own evidences, kept beside
    with pytest.raises(ValueError, match="quadrature_log_evidences"):
        estimate_reference(problem, settings, log=lambda *_: None)
