"""Stored references: keys, round trip, lookup and the problem's default ground truth."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from problems.linear_dag.problem import LinearDAG
from suite.core.problem import Problem
from suite.core.registry import make_problem
from suite.store import references as store


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


# ------------------------------------------------------------------ validation on load
class _Estimated(LinearDAG):
    """A small problem whose ground truth is its stored reference (LinearDAG's own is exact)."""

    reference_model_probs = Problem.reference_model_probs


def _stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LinearDAG, Path]:
    """A valid reference of a small problem saved under ``tmp_path`` (searched first); its npz path."""
    problem = _Estimated(num_nodes=3, data_seed=11)
    assert not store.has_exact_reference(problem)
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    return problem, _reference(problem).save(tmp_path)


def _rewrite(npz_path: Path, restamp: bool = True, **arrays: np.ndarray) -> None:
    """Replace arrays of a stored reference; with ``restamp`` its checksum follows (so only the contents are wrong)."""
    with np.load(npz_path) as stored:
        data = {name: stored[name] for name in stored.files} | arrays
    with open(npz_path, "wb") as handle:
        np.savez_compressed(handle, **data)
    if restamp:
        _edit_json(npz_path, **{store.CHECKSUM_KEY: store.arrays_sha256(data)})


def _edit_json(npz_path: Path, **changes: object) -> None:
    json_path = npz_path.with_suffix(".json")
    meta = json.loads(json_path.read_text()) | changes
    json_path.write_text(json.dumps({k: v for k, v in meta.items() if v is not None}))


def _refused(problem: LinearDAG, named: Path, match: str) -> None:
    """Loading is refused with a message naming ``named``, and the problem reports itself unusable."""
    with pytest.raises(store.InvalidReferenceError, match=match) as caught:
        store.load(problem)
    assert str(named) in str(caught.value)
    fresh = _Estimated(num_nodes=3, data_seed=11)  # (a problem keeps the reference it loaded)
    assert store.reference_problem(fresh) == str(caught.value)
    with pytest.raises(store.InvalidReferenceError):
        fresh.stored_reference()


def test_a_valid_reference_loads_with_its_checksum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem, path = _stored(tmp_path, monkeypatch)
    meta = json.loads(path.with_suffix(".json").read_text())
    with np.load(path) as arrays:
        assert meta[store.CHECKSUM_KEY] == store.arrays_sha256({k: arrays[k] for k in arrays.files})
    assert store.reference_problem(problem) is None and store.CHECKSUM_KEY not in store.load(problem).provenance


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"prob": np.array([np.nan] + [1 / 24] * 24)}, "prob holds NaN"),
        ({"prob": np.array([-0.5, 1.5] + [0.0] * 23)}, "prob holds NaN, infinite or negative"),
        ({"prob": np.full(25, 0.05)}, "prob sums to 1.25"),
        ({"prob_se": np.full(25, -0.01)}, "prob_se holds"),
        ({"log_evidence_se": np.full(25, np.inf)}, "log_evidence_se holds infinite"),
        ({"prob": np.full(24, 1 / 24)}, r"log_evidence has shape \(25,\), prob has \(24,\)"),
        ({"gold_theta": np.full((50, 2), 0.0)}, "gold_theta has 2 coordinates, linear-dag has 9"),
        ({"gold_theta": np.full((49, 9), 0.0)}, r"gold_model_index \(50,\) and gold_theta \(49, 9\) differ"),
        (
            {k: np.full(24, 1 / 24) for k in ("prob", "prob_se", "log_evidence", "log_evidence_se", "log_model_prior")}
            | {"gold_model_index": np.zeros(50, np.int32)},
            "24 model probabilities, linear-dag has 25 models",
        ),
        ({"gold_theta": np.full((50, 9), np.nan)}, "gold_theta holds NaN"),
        ({"gold_model_index": np.full(50, 99)}, "gold_model_index holds models the reference does not list"),
    ],
)
def test_invalid_arrays_are_refused_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict, match: str
) -> None:
    problem, path = _stored(tmp_path, monkeypatch)
    assert problem.num_models == 25
    _rewrite(path, **change)
    _refused(problem, path, match)


def test_a_missing_array_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem, path = _stored(tmp_path, monkeypatch)
    with np.load(path) as stored:
        data = {name: stored[name] for name in stored.files if name != "prob_se"}
    with open(path, "wb") as handle:
        np.savez_compressed(handle, **data)
    _refused(problem, path, "missing array.s. prob_se")


def test_altered_arrays_fail_the_checksum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid-looking probabilities that are not the ones stored (two swapped) are caught by the checksum only."""
    problem, path = _stored(tmp_path, monkeypatch)
    prob = store.load(problem).prob.copy()
    prob[[0, 1]] = prob[[1, 0]]
    _rewrite(path, restamp=False, prob=prob)
    _refused(problem, path, "does not match the arrays_sha256 checksum")


def test_flipped_bytes_and_truncation_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem, path = _stored(tmp_path, monkeypatch)
    good = path.read_bytes()
    middle = len(good) // 2
    path.write_bytes(good[:middle] + bytes(b ^ 0xFF for b in good[middle : middle + 8]) + good[middle + 8 :])
    _refused(problem, path, "unreadable reference|does not match")
    path.write_bytes(good[: len(good) // 3])
    _refused(problem, path, "unreadable reference")
    path.write_bytes(good)
    assert store.load(problem) is not None


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"problem": "robust-vs"}, "its json describes 'robust-vs' with key"),
        ({"config": {"num_nodes": 3, "data_seed": 12}}, "its json describes 'linear-dag' with key"),
        ({"evidence": "bridge"}, "with key"),
        ({"format": 2}, "format 2 != 1"),
        ({"config": None}, "needs a problem name and a config object"),
    ],
)
def test_a_json_of_another_problem_or_configuration_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict, match: str
) -> None:
    problem, path = _stored(tmp_path, monkeypatch)
    _edit_json(path, **change)
    json_named = change.keys() & {"format", "config"} and match != "its json describes 'linear-dag' with key"
    _refused(problem, path.with_suffix(".json") if json_named else path, match)


def test_a_missing_or_unreadable_json_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem, path = _stored(tmp_path, monkeypatch)
    json_path = path.with_suffix(".json")
    text = json_path.read_text()
    json_path.write_text(text[: len(text) // 2])
    _refused(problem, json_path, "unreadable reference")
    json_path.unlink()
    _refused(problem, path, f"has no {json_path.name} beside it")


def test_a_reference_without_checksum_is_refused_until_one_is_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older references lack the checksum: refused, with the command that adds one after checking the contents."""
    problem, path = _stored(tmp_path, monkeypatch)
    _edit_json(path, **{store.CHECKSUM_KEY: None})
    _refused(problem, path.with_suffix(".json"), "--add-checksum")
    digest = store.add_checksum(path)
    assert json.loads(path.with_suffix(".json").read_text())[store.CHECKSUM_KEY] == digest
    assert store.load(problem) is not None and store.add_checksum(path) == digest  # verified, not changed
    _edit_json(path, **{store.CHECKSUM_KEY: None})
    _rewrite(path, restamp=False, prob=np.full(25, 0.05))
    with pytest.raises(store.InvalidReferenceError, match="prob sums to"):
        store.add_checksum(path)  # never blesses invalid contents
    assert store.CHECKSUM_KEY not in json.loads(path.with_suffix(".json").read_text())


def test_a_problem_with_a_corrupt_reference_is_reported_unavailable_by_run_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """run_all.py notes the problem as unavailable, naming the file, runs the others, and exits normally."""
    from suite.cli import main

    shipped = store.find(make_problem("robust-vs"))
    assert shipped is not None and shipped.parent.parent == store.SHIPPED_DIR
    (tmp_path / "refs" / "robust-vs").mkdir(parents=True)
    corrupt = tmp_path / "refs" / "robust-vs" / shipped.name
    corrupt.write_bytes(shipped.read_bytes()[:1000])
    corrupt.with_suffix(".json").write_bytes(shipped.with_suffix(".json").read_bytes())
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path / "refs"))
    argv = ["--problems", "robust-vs,sas", "--methods", "rjmcmc-naive", "--profile", "smoke", "--seeds", "1"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--no-progress", "--eval-draws", "300"]) == 0
    out = capsys.readouterr().out
    assert f"problem robust-vs is unavailable: unreadable reference {corrupt}" in out
    assert "1 runs on" in out and "== sas" in out


def _sized(problem: Problem, size: str, shift: int) -> store.Reference:
    """A reference of ``size`` whose probabilities differ from the other size's (so the tests can tell them apart)."""
    reference = _reference(problem)
    reference.prob = np.roll(reference.prob, shift)
    reference.provenance = {"method": "test", "settings": {"profile": size}}
    return reference


def test_paper_and_quick_references_are_stored_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _Estimated(num_nodes=3, data_seed=12)
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    quick_path = _sized(problem, "quick", 0).save(tmp_path)
    paper_path = _sized(problem, "paper", 1).save(tmp_path)
    key = store.reference_key(problem)
    assert (quick_path.name, paper_path.name) == (f"{key}.npz", f"{key}.paper.npz")
    assert store.Reference.read(paper_path).profile == "paper" and store.Reference.read(quick_path).profile == "quick"
    quick_run, paper_run = _Estimated(num_nodes=3, data_seed=12), _Estimated(num_nodes=3, data_seed=12)
    paper_run.use_reference_profile("paper")
    np.testing.assert_array_equal(paper_run.stored_reference().prob, store.Reference.read(paper_path).prob)
    np.testing.assert_array_equal(quick_run.stored_reference().prob, store.Reference.read(quick_path).prob)
    described = store.describe(paper_run)
    assert (described["size"], described["size_wanted"], described["size_mismatch"]) == ("paper", "paper", False)
    # Changing the profile drops the cached reference.
    paper_run.use_reference_profile("smoke")
    np.testing.assert_array_equal(paper_run.stored_reference().prob, store.Reference.read(quick_path).prob)


def test_a_paper_run_with_only_a_quick_reference_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.report.leaderboard import reference_kind

    problem = _Estimated(num_nodes=3, data_seed=13)
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    _sized(problem, "quick", 0).save(tmp_path)
    problem.use_reference_profile("paper")
    assert problem.stored_reference().profile == "quick"  # used, not silently: the record and leaderboard say so
    described = store.describe(problem)
    assert (described["size"], described["size_wanted"], described["size_mismatch"]) == ("quick", "paper", True)
    records = [{"problem": problem.name, "reference": described}]
    assert reference_kind(records, problem.name) == (
        "estimated, quick-size; paper runs scored against the quick-size reference (no paper-size one was found)"
    )


def test_a_renamed_sized_reference_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _Estimated(num_nodes=3, data_seed=14)
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    paper_path = _sized(problem, "paper", 1).save(tmp_path)
    renamed = paper_path.with_name(f"{store.reference_key(problem)}.npz")  # a paper reference posing as the quick one
    paper_path.rename(renamed)
    paper_path.with_suffix(".json").rename(renamed.with_suffix(".json"))
    with pytest.raises(store.InvalidReferenceError, match=r"\.paper\.npz"):
        store.Reference.read(renamed)


def test_shipped_sweep_references_are_quick_size() -> None:
    """The shipped cardinality-sweep gold standards are the quick size, and say so in their records."""
    for p in (9, 14, 19, 24):
        problem = make_problem(f"robust-vs-p{p}")
        if store.find(problem) is None:
            pytest.skip(f"no shipped reference for robust-vs-p{p}")
        assert problem.stored_reference().profile == "quick"
        assert store.describe(problem)["size"] == "quick"
