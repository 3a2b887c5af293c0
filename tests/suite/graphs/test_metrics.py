"""DAG metrics against answers worked out by hand and against brute-force loops."""

from __future__ import annotations

import itertools

import pytest
import torch

from suite.graphs.metrics import (
    HIGHER_IS_BETTER,
    auroc,
    brier,
    dag_metrics,
    edge_f1,
    edge_probability_auroc,
    expected_shd,
    mmd_hamming,
    shd,
)


def adj(d: int, edges: list[tuple[int, int]]) -> torch.Tensor:
    a = torch.zeros(d, d, dtype=torch.bool)
    for i, j in edges:
        a[i, j] = True
    return a


# Truth on d = 3: 0 -> 1 -> 2, so 2 positive and 7 negative entries of the 3 x 3 matrix.
TRUTH = adj(3, [(0, 1), (1, 2)])
PERFECT = adj(3, [(0, 1), (1, 2)])
REVERSED = adj(3, [(1, 0), (1, 2)])  # 0 -> 1 reversed
MISSING = adj(3, [(0, 1)])  # 1 -> 2 missing
EXTRA = adj(3, [(0, 1), (1, 2), (0, 2)])  # 0 -> 2 added


def random_dags(n: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """Random DAGs: random upper-triangular graphs under random node permutations."""
    upper = torch.triu(torch.rand(n, d, d, generator=generator) < 0.5, diagonal=1)
    perm = torch.stack([torch.randperm(d, generator=generator) for _ in range(n)])
    return upper[torch.arange(n)[:, None, None], perm[:, :, None], perm[:, None, :]]


def test_perfect_graph() -> None:
    # tp = 2, fp = fn = 0: precision = recall = 2 / (2 + 1e-8), so F1 = 1 up to ~1e-8; no mismatches.
    g = PERFECT[None]
    assert edge_f1(g, TRUTH) == pytest.approx(1.0, abs=1e-7)
    assert shd(g, TRUTH) == 0.0
    assert expected_shd(g, TRUTH) == 0.0
    assert brier(g, TRUTH) == 0.0
    assert auroc(g, TRUTH) == 1.0
    assert edge_probability_auroc(g, TRUTH) == 1.0


@pytest.mark.parametrize(
    ("graph", "f1", "shd2", "shd1", "auc"),
    [
        # Reversed: tp = 1 (1->2), fp = 1 (1->0), fn = 1 (0->1): P = R = 1/2, F1 = 1/2; entries (0,1), (1,0) differ:
        # SHD 2, or 1 counting the reversal once; TPR = 1/2, FPR = 1/7, AUC = (1 + 1/2 - 1/7) / 2 = 19/28.
        (REVERSED, 1 / 2, 2.0, 1.0, 19 / 28),
        # Missing: tp = 1, fp = 0, fn = 1: P = 1, R = 1/2, F1 = 2/3; SHD 1; TPR = 1/2, FPR = 0, AUC = 3/4.
        (MISSING, 2 / 3, 1.0, 1.0, 3 / 4),
        # Extra: tp = 2, fp = 1, fn = 0: P = 2/3, R = 1, F1 = 4/5; SHD 1; TPR = 1, FPR = 1/7, AUC = 13/14.
        (EXTRA, 4 / 5, 1.0, 1.0, 13 / 14),
    ],
)
def test_single_error_graphs(graph: torch.Tensor, f1: float, shd2: float, shd1: float, auc: float) -> None:
    g = graph[None]
    assert edge_f1(g, TRUTH) == pytest.approx(f1, abs=1e-7)
    assert shd(g, TRUTH) == shd2
    assert shd(g, TRUTH, reversed_counts=1) == shd1
    assert expected_shd(g, TRUTH) == shd1
    assert auroc(g, TRUTH) == pytest.approx(auc, abs=1e-15)
    # One graph: P_hat = A, so Brier = number of mismatched entries = SHD, and both AUROCs coincide.
    assert brier(g, TRUTH) == shd2
    assert edge_probability_auroc(g, TRUTH) == pytest.approx(auc, abs=1e-15)


def test_weighted_mixture_by_hand() -> None:
    # PERFECT and REVERSED with weights 3 : 1 (normalised to 3/4, 1/4).
    g = torch.stack([PERFECT, REVERSED])
    w = torch.tensor([3.0, 1.0])
    assert shd(g, TRUTH, w) == pytest.approx(0.25 * 2)
    assert expected_shd(g, TRUTH, w) == pytest.approx(0.25 * 1)
    # P_hat: (0,1) = 3/4, (1,0) = 1/4, (1,2) = 1; Brier = (1/4)^2 + (1/4)^2 = 1/8.
    assert brier(g, TRUTH, w) == pytest.approx(1 / 8, abs=1e-15)
    assert edge_f1(g, TRUTH, w) == pytest.approx(0.75 * 1 + 0.25 * 0.5, abs=1e-7)
    # Equal weights: P_hat (0,1) = 1/2, (1,0) = 1/2, (1,2) = 1, six other zeros. Positives {1/2, 1} vs negatives
    # {1/2, 0 x 6}: 1 beats all 7; 1/2 beats 6 and ties 1 -> (7 + 6.5) / 14 = 27/28. The per-graph AUROC instead
    # averages 1 and 19/28: 47/56.
    assert edge_probability_auroc(g, TRUTH) == pytest.approx(27 / 28, abs=1e-15)
    assert auroc(g, TRUTH) == pytest.approx(47 / 56, abs=1e-15)


def test_weights_equal_repeated_samples() -> None:
    gen = torch.Generator().manual_seed(1)
    d = 5
    graphs = random_dags(6, d, gen)
    truth = random_dags(1, d, gen)[0]
    counts = torch.tensor([1, 3, 0, 2, 5, 1])
    repeated = graphs.repeat_interleave(counts, dim=0)
    weighted = dag_metrics(graphs, truth, counts.to(torch.float64) * 0.37)  # any scale: weights are normalised
    plain = dag_metrics(repeated, truth)
    assert weighted.keys() == plain.keys() == {"edge_f1", "shd", "expected_shd", "brier", "auroc", "edge_auroc"}
    for key in plain:
        assert weighted[key] == pytest.approx(plain[key], abs=1e-12), key
    assert mmd_hamming(graphs, repeated, counts) == pytest.approx(0.0, abs=1e-15)


def test_higher_is_better_names_metrics() -> None:
    assert HIGHER_IS_BETTER == {"edge_f1", "auroc", "edge_auroc"}
    assert HIGHER_IS_BETTER < set(dag_metrics(PERFECT[None], TRUTH))


def _shd_loop(g: torch.Tensor, t: torch.Tensor) -> int:
    """Extra + missing + reversed edges over unordered pairs, as [BayesDAG]'s E + M + R."""
    count = 0
    for i, j in itertools.combinations(range(t.shape[0]), 2):
        true_pair, pred_pair = (int(t[i, j]), int(t[j, i])), (int(g[i, j]), int(g[j, i]))
        if true_pair == (0, 0):
            count += sum(pred_pair)  # each extra edge
        elif pred_pair != true_pair:
            count += 1  # missing, reversed, or an extra opposite edge
    return count


def test_shd_matches_loops_on_random_dags() -> None:
    gen = torch.Generator().manual_seed(2)
    graphs = random_dags(40, 6, gen)
    truth = random_dags(1, 6, gen)[0]
    w = torch.rand(40, generator=gen, dtype=torch.float64)
    full = [int((g != truth).sum()) for g in graphs]
    once = [_shd_loop(g, truth) for g in graphs]
    wn = w / w.sum()
    assert shd(graphs, truth, w) == pytest.approx(float(wn @ torch.tensor(full, dtype=torch.float64)), abs=1e-12)
    assert expected_shd(graphs, truth, w) == pytest.approx(
        float(wn @ torch.tensor(once, dtype=torch.float64)), abs=1e-12
    )


def _mann_whitney(score: torch.Tensor, label: torch.Tensor) -> float:
    pos, neg = score[label == 1].tolist(), score[label == 0].tolist()
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_aurocs_match_pairwise_counts() -> None:
    gen = torch.Generator().manual_seed(3)
    graphs = random_dags(7, 5, gen)
    truth = random_dags(1, 5, gen)[0]
    w = torch.tensor([1.0, 2.0, 1.0, 1.0, 3.0, 1.0, 1.0], dtype=torch.float64)  # small integers: P_hat has exact ties
    label = truth.flatten().long()
    p_hat = (w @ graphs.flatten(1).double()) / w.sum()  # integer sums: exact ties
    assert edge_probability_auroc(graphs, truth, w) == pytest.approx(_mann_whitney(p_hat, label), abs=1e-14)
    # A binary score is a ROC curve through one point: its Mann-Whitney AUC (ties 1/2) is sklearn's value.
    per_graph = torch.tensor([_mann_whitney(g.flatten().double(), label) for g in graphs], dtype=torch.float64)
    assert auroc(graphs, truth, w) == pytest.approx(float(w @ per_graph / w.sum()), abs=1e-14)


def test_constant_graph_has_auroc_one_half() -> None:
    # Empty or complete graph: TPR = FPR (0 or 1), so (1 + TPR - FPR) / 2 = 1/2, as sklearn gives for a constant score.
    g = torch.stack([torch.zeros(3, 3), torch.ones(3, 3)])
    assert auroc(g, TRUTH) == 0.5


@pytest.mark.parametrize("truth", [torch.zeros(3, 3), torch.ones(3, 3)])
def test_single_class_truth_raises(truth: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="single class"):
        auroc(PERFECT[None], truth)
    with pytest.raises(ValueError, match="single class"):
        edge_probability_auroc(PERFECT[None], truth)


def test_mmd_by_hand() -> None:
    # PERFECT vs REVERSED differ in 2 of 9 entries: k = 1 - 2/9 = 7/9, MMD^2 = 1 + 1 - 2 * 7/9 = 4/9.
    assert mmd_hamming(PERFECT[None], REVERSED[None]) == pytest.approx(4 / 9, abs=1e-15)
    assert mmd_hamming(PERFECT[None], REVERSED[None], squared=False) == pytest.approx(2 / 3, abs=1e-15)


def _mmd_loop(p: torch.Tensor, q: torch.Tensor, wp: torch.Tensor, wq: torch.Tensor) -> float:
    d2 = p.shape[-1] ** 2
    wp, wq = (wp / wp.sum()).tolist(), (wq / wq.sum()).tolist()

    def k(a: torch.Tensor, b: torch.Tensor) -> float:
        return 1.0 - int((a != b).sum()) / d2

    def mean_k(x: torch.Tensor, wx: list[float], y: torch.Tensor, wy: list[float]) -> float:
        return sum(wx[i] * wy[j] * k(x[i], y[j]) for i in range(len(x)) for j in range(len(y)))

    return mean_k(p, wp, p, wp) + mean_k(q, wq, q, wq) - 2 * mean_k(p, wp, q, wq)


def _mmd_matmul(p: torch.Tensor, q: torch.Tensor, wp: torch.Tensor, wq: torch.Tensor) -> float:
    """The V-statistic through pairwise Hamming distances H = |a| + |b| - 2 a.b of flattened 0/1 vectors."""
    d2 = p.shape[-1] ** 2
    wp, wq = wp / wp.sum(), wq / wq.sum()

    def mean_k(x: torch.Tensor, wx: torch.Tensor, y: torch.Tensor, wy: torch.Tensor) -> float:
        a, b = x.flatten(1).double(), y.flatten(1).double()
        h = a.sum(1)[:, None] + b.sum(1)[None, :] - 2 * a @ b.T
        return float(wx @ (1 - h / d2) @ wy)

    return mean_k(p, wp, p, wp) + mean_k(q, wq, q, wq) - 2 * mean_k(p, wp, q, wq)


def test_mmd_matches_pairwise_computations() -> None:
    gen = torch.Generator().manual_seed(4)
    p, q = random_dags(9, 4, gen), random_dags(7, 4, gen)
    wp = torch.rand(9, generator=gen, dtype=torch.float64)
    wq = torch.rand(7, generator=gen, dtype=torch.float64)
    value = mmd_hamming(p, q, wp, wq)
    assert value > 0
    assert value == pytest.approx(_mmd_loop(p, q, wp, wq), abs=1e-12)
    assert value == pytest.approx(_mmd_matmul(p, q, wp, wq), abs=1e-12)
    assert mmd_hamming(q, p, wq, wp) == value  # symmetric
    assert mmd_hamming(p, p, wp, wp) == 0.0  # identical weighted distributions
    assert mmd_hamming(p, q) == pytest.approx(
        _mmd_loop(p, q, torch.ones(9, dtype=torch.float64), torch.ones(7, dtype=torch.float64)), abs=1e-12
    )


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: shd(torch.zeros(2, 3, 4), torch.zeros(3, 4)), "square"),
        (lambda: shd(torch.zeros(3, 3), torch.zeros(3, 3)), r"\[S, d, d\]"),
        (lambda: shd(torch.zeros(2, 3, 3), torch.zeros(4, 4)), "truth must have shape"),
        (lambda: shd(torch.full((2, 3, 3), 0.5), torch.zeros(3, 3)), "0/1"),
        (lambda: shd(torch.zeros(2, 3, 3), torch.full((3, 3), 2.0)), "0/1"),
        (lambda: shd(torch.zeros(2, 3, 3), TRUTH, torch.tensor([1.0, -1.0])), "non-negative"),
        (lambda: shd(torch.zeros(2, 3, 3), TRUTH, torch.tensor([0.0, 0.0])), "all zero"),
        (lambda: shd(torch.zeros(2, 3, 3), TRUTH, torch.ones(3)), "one per graph"),
        (lambda: shd(torch.zeros(2, 3, 3), TRUTH, reversed_counts=3), "reversed_counts"),
        (lambda: mmd_hamming(torch.zeros(2, 3, 3), torch.zeros(2, 4, 4)), "same d"),
        (lambda: mmd_hamming(torch.zeros(2, 3, 3), torch.zeros(2, 3, 3), weights_q=torch.zeros(2)), "all zero"),
    ],
)
def test_invalid_inputs_raise(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
