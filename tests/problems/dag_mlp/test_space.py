"""PermutationDAGSpace: Lehmer decoding (VTI App. F.6), two-word indices, (P, U) <-> adjacency."""

import itertools
import math

import pytest
import torch

from problems.dag_mlp.space import PermutationDAGSpace
from suite.graphs.dag import is_acyclic


def test_lehmer_decoding_matches_the_papers_example() -> None:
    """App. F.6: d = 5, c = (2, 1, 0, 0) puts nodes 1..5 (1-based) at rows 3, 2, 1, 4, 5."""
    space = PermutationDAGSpace(5)
    model = space.from_variables(torch.tensor([[2, 1, 0, 0] + [0] * space.num_edge_bits]))
    assert space.positions(model).tolist() == [[2, 1, 0, 3, 4]]


def test_indices_round_trip_through_variables_identifiers_and_parts() -> None:
    space = PermutationDAGSpace(6)
    models = space.sample_uniform(500, torch.Generator().manual_seed(0))
    assert torch.equal(space.from_variables(space.to_variables(models)), models)
    assert torch.equal(space.encode(space.positions(models), space.upper(models)), models)
    for model in models[:20].tolist():
        assert space.index(space.identifier(tuple(model))) == tuple(model)
    with pytest.raises(KeyError, match="pos="):
        space.index("pos=0,0,1;U=0")


def test_adjacency_is_p_transpose_u_p() -> None:
    space = PermutationDAGSpace(5)
    models = space.sample_uniform(200, torch.Generator().manual_seed(1))
    sigma, upper = space.positions(models), space.upper(models).to(torch.float64)
    perm = torch.zeros(200, 5, 5, dtype=torch.float64)
    perm[torch.arange(200)[:, None], sigma, torch.arange(5)] = 1.0  # P[sigma(i), i] = 1
    expected = perm.transpose(1, 2) @ upper @ perm
    assert torch.equal(space.adjacency(models), expected > 0.5)
    assert bool(is_acyclic(space.adjacency(models)).all())


def test_every_dag_on_three_nodes_is_reached_and_from_adjacency_inverts() -> None:
    """The 6 x 8 (P, U) pairs on 3 nodes give exactly the 25 labelled DAGs."""
    space = PermutationDAGSpace(3)
    models = torch.tensor([[r, b] for r in range(math.factorial(3)) for b in range(8)])
    graphs = space.adjacency(models)
    assert torch.unique(graphs.flatten(1), dim=0).shape[0] == 25
    assert torch.equal(space.adjacency(space.from_adjacency(graphs)), graphs)


def test_from_adjacency_rejects_cycles_and_self_loops() -> None:
    space = PermutationDAGSpace(3)
    cycle = torch.zeros(2, 3, 3, dtype=torch.bool)
    cycle[0, 0, 1] = cycle[0, 1, 2] = cycle[0, 2, 0] = True
    cycle[1, 1, 1] = True
    with pytest.raises(ValueError, match="rows 0, 1 are not DAGs"):
        space.from_adjacency(cycle)


def test_jumps_change_exactly_one_variable() -> None:
    space = PermutationDAGSpace(5)
    gen = torch.Generator().manual_seed(2)
    models = space.sample_uniform(2000, gen)
    proposed, log_ratio = space.propose_jump(models, gen)
    changed = (space.to_variables(proposed) != space.to_variables(models)).sum(-1)
    assert bool((changed == 1).all()) and bool((log_ratio == 0).all())


def test_uniform_draws_cover_every_lehmer_digit_value_evenly() -> None:
    """Each digit of 20,000 uniform draws is uniform on its radix: counts within 5 binomial SEs."""
    space = PermutationDAGSpace(4)
    digits = space.digits(space.sample_uniform(20_000, torch.Generator().manual_seed(3)))
    for i, radix in enumerate(space.radices):
        counts = torch.bincount(digits[:, i], minlength=radix).to(torch.float64)
        p = 1.0 / radix
        assert float((counts - 20_000 * p).abs().max()) < 5 * math.sqrt(20_000 * p * (1 - p))


def test_size_limits() -> None:
    assert PermutationDAGSpace(10).size == math.factorial(10) * 2**45
    with pytest.raises(ValueError, match="num_nodes"):
        PermutationDAGSpace(12)
    assert list(itertools.islice(PermutationDAGSpace(11).cardinalities, 3)) == [11, 10, 9]
