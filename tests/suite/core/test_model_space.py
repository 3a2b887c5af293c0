"""Model spaces: identifiers, uniform draws and jump proposals."""

import pytest
import torch

from suite.core.model_space import BinarySpace, CategoricalSpace, CountSpace


def test_categorical_identifiers_round_trip() -> None:
    space = CategoricalSpace(["a", "b", "c"])
    assert [space.index(space.identifier(i)) for i in range(3)] == [0, 1, 2]
    with pytest.raises(KeyError, match="valid: a, b, c"):
        space.index("z")


def test_categorical_jumps_are_uniform_over_other_models() -> None:
    space = CategoricalSpace(["a", "b", "c", "d"])
    gen = torch.Generator().manual_seed(1)
    m = torch.zeros(120_000, dtype=torch.int64)
    new, log_ratio = space.propose_jump(m, gen)
    assert (new != m).all() and (log_ratio == 0).all()
    freq = torch.bincount(new, minlength=4).double() / len(m)
    # each of models 1..3 has probability 1/3; 4 binomial standard errors ~ 0.0054
    assert torch.allclose(freq[1:], torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.0055)


def test_binary_identifiers_put_bit_zero_first() -> None:
    space = BinarySpace(4)
    assert space.identifier(1) == "1000" and space.identifier(6) == "0110"
    assert all(space.index(space.identifier(i)) == i for i in range(16))
    assert space.bits(torch.tensor([6])).tolist() == [[False, True, True, False]]


def test_binary_jumps_flip_exactly_one_bit() -> None:
    space = BinarySpace(5)
    gen = torch.Generator().manual_seed(2)
    m = space.sample_uniform(10_000, gen)
    new, log_ratio = space.propose_jump(m, gen)
    flipped = (space.bits(m) ^ space.bits(new)).sum(-1)
    assert (flipped == 1).all() and (log_ratio == 0).all()


def test_index_checks() -> None:
    space = CategoricalSpace(["a", "b"])
    with pytest.raises(ValueError):
        space.check_indices(torch.tensor([0, 2]))
    with pytest.raises(TypeError):
        space.check_indices(torch.tensor([0.0]))


def test_count_identifiers_name_the_count() -> None:
    space = CountSpace(1, 30)
    assert space.num_models == 30 and space.identifier(0) == "k=1" and space.index("k=30") == 29
    assert space.count(torch.tensor([0, 4])).tolist() == [1, 5]
    for bad in ("k=0", "k=31", "p=3", "k=x"):
        with pytest.raises(KeyError, match="1 <= count <= 30"):
            space.index(bad)
    with pytest.raises(ValueError, match="0 <= low <= high"):
        CountSpace(3, 2)


@pytest.mark.parametrize(("low", "high"), [(0, 5), (1, 2), (0, 2)])
def test_count_jumps_go_to_a_neighbour_with_the_stated_log_ratio(low: int, high: int) -> None:
    space = CountSpace(low, high)
    k = space.num_models
    # The proposal matrix from its definition: up or down by 1/2 each, from an end to its neighbour.
    exact = torch.zeros(k, k, dtype=torch.float64)
    for m in range(k):
        neighbours = [n for n in (m - 1, m + 1) if 0 <= n < k]
        for n in neighbours:
            exact[m, n] = 1.0 / len(neighbours)
    gen = torch.Generator().manual_seed(3)
    m = torch.arange(k).repeat(40_000)
    new, log_ratio = space.propose_jump(m, gen)
    counts = torch.zeros(k, k, dtype=torch.float64).index_put_((m, new), torch.ones(len(m), dtype=torch.float64), True)
    # 40,000 jumps from each model: 4 binomial standard errors of a frequency 1/2 are 0.01.
    assert torch.allclose(counts / 40_000, exact, atol=0.01)
    expected = torch.log(exact[new, m]) - torch.log(exact[m, new])
    assert torch.allclose(log_ratio.double(), expected, atol=1e-6)
