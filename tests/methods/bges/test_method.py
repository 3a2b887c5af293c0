"""bges: causal-learn's graphs read as CPDAGs, classes expanded exactly, q(G) from bootstraps, options."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from methods.bges import method as bges_method
from methods.bges.method import class_members, cpdag_of_ges
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem
from suite.graphs.cpdag import cpdags
from suite.graphs.dag_space import DAGSpace
from suite.run.runner import resolve_and_run

pytest.importorskip("causallearn.search.ScoreBased.GES")


def _space(d: int) -> torch.Tensor:
    space = DAGSpace(d)
    return space.adjacency(torch.arange(space.num_models)).bool()


def test_every_dag_class_is_found_exactly_from_its_cpdag() -> None:
    """On 4 nodes (543 DAGs) each DAG's CPDAG gives back exactly the DAGs sharing it (the class sizes sum up)."""
    dags = _space(4)
    all_cpdags = cpdags(dags)
    sizes = {}
    for index in range(len(dags)):
        members = class_members(all_cpdags[index], all_cpdags, dags)
        assert index in members.tolist()
        assert bool((all_cpdags[members] == all_cpdags[index]).all())
        sizes[tuple(members.tolist())] = len(members)
    assert sum(sizes.values()) == len(dags) == 543
    assert len(sizes) == 185  # the number of Markov equivalence classes on 4 labelled nodes


def test_an_unfinished_pdag_is_expanded_to_its_consistent_extensions() -> None:
    """0 -> 1 - 2 (not a CPDAG: Meek's R1 orients 1 -> 2) stands for the one DAG 0 -> 1 -> 2."""
    dags = _space(3)
    pdag = torch.tensor([[0, 1, 0], [0, 0, 1], [0, 1, 0]])
    members = class_members(pdag, cpdags(dags), dags)
    assert len(members) == 1
    assert dags[members[0]].to(torch.int64).tolist() == [[0, 1, 0], [0, 0, 1], [0, 0, 0]]


def test_ges_finds_a_v_structure_and_its_graph_is_read_with_the_right_directions() -> None:
    """Data from 0 -> 2 <- 1 (n = 2,000): GES returns that compelled class; causal-learn marks i -> j as -1 at i."""
    from causallearn.search.ScoreBased.GES import ges

    rng = np.random.default_rng(0)
    x0, x1 = rng.normal(size=2000), rng.normal(size=2000)
    x2 = x0 + x1 + 0.5 * rng.normal(size=2000)
    graph = ges(np.column_stack([x0, x1, x2]), score_func="local_score_BIC")["G"].graph
    assert cpdag_of_ges(graph).tolist() == [[0, 0, 1], [0, 0, 1], [0, 0, 0]]


def test_a_smoke_run_gives_an_empirical_q_whose_mass_per_bootstrap_is_split_over_its_class() -> None:
    problem = make_problem("linear-dag-bge-sf", data_seed=0)
    result = resolve_and_run(make_method("bges"), problem, RunContext(seed=0, profile="smoke"))
    assert result.status == "ok", result.reason
    diagnostics = result.diagnostics
    assert diagnostics["bootstraps"] == 5 and diagnostics["unmatched"] == 0
    q = result.model_probs
    assert abs(float(q.prob.sum()) - 1) < 1e-12
    # Every DAG of a bootstrap's class gets the same share: within each class (same CPDAG) q is constant.
    classes = cpdags(problem.adjacency(q.index)).flatten(1)
    for row in torch.unique(classes, dim=0):
        same = (classes == row).all(-1)
        assert torch.allclose(q.prob[same], q.prob[same][0].expand(int(same.sum())))
    # 5 bootstraps: each class carries a multiple of 1/5.
    per_class = torch.stack([q.prob[(classes == row).all(-1)].sum() for row in torch.unique(classes, dim=0)])
    assert torch.allclose(per_class * 5, (per_class * 5).round(), atol=1e-9)


def test_expansion_one_gives_each_bootstrap_one_dag() -> None:
    problem = make_problem("linear-dag-bge-er", data_seed=1)
    result = resolve_and_run(make_method("bges", expansion="one"), problem, RunContext(seed=0, profile="smoke"))
    assert result.status == "ok", result.reason
    assert torch.allclose(result.model_probs.prob * 5, (result.model_probs.prob * 5).round(), atol=1e-9)


def test_bad_options_are_refused_and_a_missing_library_is_named(monkeypatch) -> None:
    problem = make_problem("linear-dag-bge-er", data_seed=0)
    with pytest.raises(ValueError, match="unknown expansion 'all'; valid: class, one"):
        make_method("bges", expansion="all").resolve(problem, "smoke")
    with pytest.raises(ValueError, match="num_bootstraps must be a positive integer"):
        make_method("bges", num_bootstraps=0).resolve(problem, "smoke")
    monkeypatch.setattr(bges_method, "library_version", lambda: None)
    assert 'pip install -e ".[bges]"' in make_method("bges").supports(problem)
