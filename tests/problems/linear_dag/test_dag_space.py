"""DAG enumeration and edge-toggle jumps."""

import pytest
import torch

from suite.graphs.dag_space import DAGSpace, codes_to_adjacency, enumerate_dags


@pytest.mark.parametrize(("d", "count"), [(1, 1), (2, 3), (3, 25), (4, 543)])
def test_dag_counts_match_oeis_a003024(d: int, count: int) -> None:
    assert enumerate_dags(d).numel() == count


def test_identifiers_round_trip() -> None:
    space = DAGSpace(4)
    assert space.identifier(0) == "empty"
    assert all(space.index(space.identifier(i)) == i for i in range(space.num_models))
    with pytest.raises(KeyError):
        space.index("0->1,1->0")  # a cycle


def test_jumps_change_one_edge_and_stay_acyclic() -> None:
    space = DAGSpace(4)
    gen = torch.Generator().manual_seed(0)
    m = space.sample_uniform(20_000, gen)
    new, log_ratio = space.propose_jump(m, gen)
    before, after = space.adjacency(m), space.adjacency(new)
    changed = (before ^ after).flatten(1).sum(-1)
    reversal = (before & ~after & after.transpose(1, 2)).flatten(1).sum(-1) == 1
    assert ((changed == 1) | ((changed == 2) & reversal)).all()
    assert reversal.any() and (changed == 1).any()
    # log j(m|m') - log j(m'|m) = log |nbr(m)| - log |nbr(m')|, and the relation is symmetric.
    nbr = (space.neighbour >= 0).sum(-1).double()
    torch.testing.assert_close(log_ratio, nbr[m].log() - nbr[new].log())
    assert ((space.neighbour[new] == m[:, None]).any(-1)).all()


def test_adjacency_codes_put_slot_k_at_bit_k() -> None:
    adjacency = codes_to_adjacency(torch.tensor([1, 2]), 3)  # slots: (0,1), (0,2), ...
    assert adjacency[0, 0, 1] and adjacency[1, 0, 2] and adjacency.sum() == 2


def test_jumps_are_uniform_over_valid_moves() -> None:
    space = DAGSpace(3)
    gen = torch.Generator().manual_seed(3)
    start = torch.full((60_000,), 5, dtype=torch.int64)
    new, _ = space.propose_jump(start, gen)
    valid = space.neighbour[5][space.neighbour[5] >= 0]
    counts = torch.stack([(new == v).sum() for v in valid]).double()
    expected = len(start) / len(valid)
    assert counts.sum() == len(start)
    assert ((counts - expected).abs() < 4.5 * expected**0.5).all()  # Poisson-scale binomial errors
