"""Stored references: keys, round trip, lookup and the problem's default ground truth."""

import numpy as np
import pytest
import torch

from problems.linear_dag.problem import LinearDAG
from suite.reference import store
from suite.registry import make_problem


def _reference(problem, n: int = 50) -> store.Reference:
    k = problem.num_models
    rng = np.random.default_rng(0)
    prob = rng.dirichlet(np.ones(k))
    index = rng.integers(0, k, n)
    theta = np.where(problem.mask(torch.as_tensor(index)).numpy(), rng.standard_normal((n, problem.dim_max)), 0.0)
    return store.Reference(
        problem.name,
        problem.config(),
        np.log(prob),
        np.full(k, 0.01),
        np.full(k, -np.log(k)),
        prob,
        np.full(k, 0.001),
        index,
        theta,
        {"method": "test"},
    )


def test_key_depends_on_name_and_config() -> None:
    assert store.reference_key(LinearDAG(num_nodes=3)) == store.reference_key(LinearDAG(num_nodes=3))
    assert store.reference_key(LinearDAG(num_nodes=3)) != store.reference_key(LinearDAG(num_nodes=3, data_seed=1))


def test_round_trip_and_lookup(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = LinearDAG(num_nodes=3, data_seed=11)
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    assert store.find(problem) is None and "python -m suite.reference" in store.missing_message(problem)
    saved = _reference(problem)
    saved.save(tmp_path)
    loaded = store.load(problem)
    np.testing.assert_array_equal(loaded.prob, saved.prob)
    np.testing.assert_array_equal(loaded.gold_model_index, saved.gold_model_index)
    np.testing.assert_allclose(loaded.gold_theta, saved.gold_theta, rtol=1e-7)  # stored as float32
    assert loaded.provenance["method"] == "test"
    assert not list(tmp_path.rglob("*.tmp"))
    draws = loaded.draws(20, torch.Generator().manual_seed(0))
    assert len(draws) == 20 and draws.theta.dtype == torch.float64
    assert len(loaded.draws(10_000, torch.Generator().manual_seed(0))) == 50  # capped at what is stored


def test_exact_problems_never_use_stored_estimates() -> None:
    assert store.describe(make_problem("sas")) == {"kind": "exact"}
    assert store.has_exact_reference(make_problem("linear-dag-d4"))


def test_shipped_references_match_their_problems() -> None:
    """Every shipped reference belongs to a registered problem with an unchanged configuration and says how it
    was made; so a changed problem never silently uses a stale reference."""
    shipped = sorted(store.SHIPPED_DIR.glob("*/*.npz"))
    assert shipped, "no shipped references"
    for path in shipped:
        reference = store.Reference.read(path)
        problem = make_problem(reference.problem)
        assert path.stem == store.reference_key(problem), f"{path} is stale: regenerate it"
        assert reference.prob.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.all(reference.prob_se >= 0)
        if reference.provenance.get("evidence") == "rjmcmc":  # visit frequencies: no per-model evidences
            assert {"method", "settings", "versions", "num_visited_models"} <= set(reference.provenance)
            assert np.all(np.isnan(reference.log_evidence)) and len(reference.models()) == len(reference.prob)
        else:
            assert np.all(np.isfinite(reference.log_evidence_se))
            assert {"method", "settings", "versions", "per_model"} <= set(reference.provenance)
        assert (reference.gold_theta[~problem.mask(torch.as_tensor(reference.gold_model_index)).numpy()] == 0).all()


def test_training_and_scoring_draws_never_overlap() -> None:
    """The halves are disjoint and cover the stored draws; a problem scores on one and trains on the other."""
    problem = LinearDAG(num_nodes=3, data_seed=11)
    reference = _reference(problem, n=51)
    rows = {
        split: {tuple(t) for t in reference.draws(100, torch.Generator().manual_seed(0), split).theta.tolist()}
        for split in store.SPLITS
    }
    assert len(rows["test"]) + len(rows["train"]) == len(rows["all"]) == 51
    assert not rows["test"] & rows["train"]
    with pytest.raises(ValueError, match="valid: all, test, train"):
        reference.draws(1, torch.Generator(), "validation")
    stored = make_problem("block-vs")
    if stored.stored_reference() is None:
        pytest.skip(stored.unavailable_reason() or "no stored block-vs reference")
    # (Stored SMC particles may repeat a value, so the halves of a real reference are compared by count.)
    total = len(stored.stored_reference().gold_model_index)
    test = stored.reference_draws(10 * total, torch.Generator().manual_seed(0))
    train = stored.training_draws(10 * total, torch.Generator().manual_seed(0))
    assert len(test) + len(train) == total
