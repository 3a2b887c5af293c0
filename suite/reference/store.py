"""On-disk references: model probabilities, evidences and gold draws with their Monte Carlo error and provenance.

A reference is keyed by the problem's name and a hash of its configuration
(and of its evidence method when that is not plain SMC: the problem's
``reference_settings["evidence"]``), so a problem built with other constants,
or asking for another estimator, never picks up a stale answer. It is
two files in ``references/<problem>/``: ``<key>.npz`` (arrays) and
``<key>.json`` (provenance: how it was made, settings, seeds, versions,
diagnostics). Folders searched, in order: ``TDBENCH_REFERENCES``
(``os.pathsep``-separated) and the repository's ``references/``, where small
references are shipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from suite.types import Draws, ModelProbs

if TYPE_CHECKING:
    from suite.problem import Problem

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SHIPPED_DIR = REPO_ROOT / "references"
ENV_VAR = "TDBENCH_REFERENCES"
FORMAT_VERSION = 1


def _key(name: str, config: dict[str, Any], evidence: str) -> str:
    """Hash of name, configuration and (unless "smc", so that older keys stay valid) the evidence method."""
    content: dict[str, Any] = {"name": name, "config": config}
    if evidence != "smc":
        content["evidence"] = evidence
    payload = json.dumps(content, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def evidence_method(problem: Problem) -> str:
    """The estimator a reference asks for: "smc", "bridge", "both" (per-model evidences), "rjmcmc" or "none"."""
    return getattr(problem, "reference_settings", {}).get("evidence", "smc")


def reference_key(problem: Problem) -> str:
    """Stable key of a problem instance: a hash of its name, configuration and evidence method."""
    return _key(problem.name, problem.config(), evidence_method(problem))


def search_path() -> list[Path]:
    """Folders searched for references, in order."""
    folders = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    return [*folders, SHIPPED_DIR]


#: Halves of the stored draws: scoring ("test") and learning ("train") never share a draw.
SPLITS = ("all", "test", "train")


@dataclass
class Reference:
    """Ground truth of one problem instance, estimated or exact, with its Monte Carlo error."""

    problem: str
    config: dict[str, Any]
    log_evidence: np.ndarray  # [K] log p(D | m)
    log_evidence_se: np.ndarray  # [K] its Monte Carlo standard error (0 when exact)
    log_model_prior: np.ndarray  # [K]
    prob: np.ndarray  # [K] p(m | D)
    prob_se: np.ndarray  # [K] its Monte Carlo standard error
    gold_model_index: np.ndarray  # [N] int64
    gold_theta: np.ndarray  # [N, D]; inactive coordinates are zero
    provenance: dict[str, Any] = field(default_factory=dict)
    #: [K] the models the arrays above describe, when not all of ``0..K-1`` (spaces too large to enumerate,
    #: where an MCMC reference lists the models it visited); None means models ``0..K-1``.
    model_index: np.ndarray | None = None

    @property
    def key(self) -> str:
        """Hash of problem name, configuration and evidence method."""
        return _key(self.problem, self.config, self.provenance.get("evidence", "smc"))

    def model_probs(self) -> ModelProbs:
        """p(m | D) with standard errors (of the visited models only, for an MCMC reference)."""
        if self.model_index is None:
            return ModelProbs.from_dense(torch.as_tensor(self.prob), torch.as_tensor(self.prob_se))
        return ModelProbs(
            torch.as_tensor(self.model_index, dtype=torch.int64),
            torch.as_tensor(self.prob, dtype=torch.float64),
            torch.as_tensor(self.prob_se, dtype=torch.float64),
        )

    def models(self) -> np.ndarray:
        """The model index of each entry of ``prob`` (``0..K-1`` unless ``model_index`` says otherwise)."""
        return np.arange(len(self.prob)) if self.model_index is None else self.model_index

    def draws(self, num_draws: int, generator: torch.Generator, split: str = "all") -> Draws:
        """``min(num_draws, available)`` stored draws of ``split``, a random subset without replacement, in float64.

        The stored draws are in random order; ``split="test"`` is their first half (the draws the suite scores
        methods on), ``"train"`` the second half (for methods that learn from posterior draws), ``"all"`` both.
        """
        total = len(self.gold_model_index)
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        start, stop = {"all": (0, total), "test": (0, total // 2), "train": (total // 2, total)}[split]
        n = min(num_draws, stop - start)
        pick = start + torch.randperm(stop - start, generator=generator)[:n].sort().values
        theta = torch.as_tensor(self.gold_theta, dtype=torch.float64)[pick]
        return Draws(torch.as_tensor(self.gold_model_index, dtype=torch.int64)[pick], theta)

    # ------------------------------------------------------------------ files
    def save(self, folder: Path = SHIPPED_DIR) -> Path:
        """Write ``<folder>/<problem>/<key>.npz`` and ``.json`` atomically; returns the npz path."""
        target = Path(folder) / self.problem
        target.mkdir(parents=True, exist_ok=True)
        arrays = {
            "log_evidence": self.log_evidence,
            "log_evidence_se": self.log_evidence_se,
            "log_model_prior": self.log_model_prior,
            "prob": self.prob,
            "prob_se": self.prob_se,
            "gold_model_index": self.gold_model_index.astype(np.int32),
            # float32 halves the shipped size; the rounding (1e-7 relative) is far below any metric's MC error.
            "gold_theta": self.gold_theta.astype(np.float32),
        }
        if self.model_index is not None:
            arrays["model_index"] = self.model_index.astype(np.int64)
        meta = {"format": FORMAT_VERSION, "problem": self.problem, "config": self.config, **self.provenance}
        npz_path, json_path = target / f"{self.key}.npz", target / f"{self.key}.json"
        for path, write in (
            (npz_path, lambda h: np.savez_compressed(h, **arrays)),
            (json_path, lambda h: h.write(json.dumps(meta, indent=1, default=str).encode())),
        ):
            fd, tmp = tempfile.mkstemp(dir=target, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                write(handle)
            os.replace(tmp, path)
        return npz_path

    @classmethod
    def read(cls, npz_path: Path) -> Reference:
        """Load a reference from its npz file (and the json beside it)."""
        meta = json.loads(Path(npz_path).with_suffix(".json").read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"{npz_path}: reference format {meta.get('format')} != {FORMAT_VERSION}")
        with np.load(npz_path) as arrays:
            data = {k: arrays[k] for k in arrays.files}
        provenance = {k: v for k, v in meta.items() if k not in ("format", "problem", "config")}
        return cls(
            problem=meta["problem"],
            config=meta["config"],
            log_evidence=data["log_evidence"],
            log_evidence_se=data["log_evidence_se"],
            log_model_prior=data["log_model_prior"],
            prob=data["prob"],
            prob_se=data["prob_se"],
            gold_model_index=data["gold_model_index"].astype(np.int64),
            gold_theta=data["gold_theta"].astype(np.float64),
            provenance=provenance,
            model_index=data["model_index"].astype(np.int64) if "model_index" in data else None,
        )


def find(problem: Problem) -> Path | None:
    """Path of the stored reference of this problem instance, or None."""
    key = reference_key(problem)
    for folder in search_path():
        path = folder / problem.name / f"{key}.npz"
        if path.exists():
            return path
    return None


def load(problem: Problem) -> Reference | None:
    """The stored reference of this problem instance, or None when there is none."""
    path = find(problem)
    return None if path is None else Reference.read(path)


def missing_message(problem: Problem) -> str:
    """What to run when a problem has no stored reference."""
    return (
        f"no stored reference for {problem.name!r} (key {reference_key(problem)}); generate it with "
        f"`python -m suite.reference {problem.name}` (searched: {', '.join(map(str, search_path()))})"
    )


def has_exact_reference(problem: Problem) -> bool:
    """Whether the problem computes its ground truth itself (exact answers always win over estimates)."""
    from suite.problem import Problem as Base

    return type(problem).reference_model_probs is not Base.reference_model_probs


def describe(problem: Problem) -> dict[str, Any]:
    """Where a problem's ground truth comes from, for run records: exact, estimated (with its error) or missing."""
    if has_exact_reference(problem):
        return {"kind": "exact"}
    if evidence_method(problem) == "none":
        return {"kind": "none", "message": getattr(problem, "reference_settings", {}).get("why", "")}
    path = find(problem)
    if path is None:
        return {"kind": "missing", "message": missing_message(problem)}
    reference = Reference.read(path)
    keys = (
        "method",
        "evidence",
        "evidence_used",
        "smc_initial",
        "max_log_evidence_se",
        "max_prob_se",
        "max_nuts_rhat_used",
        "started_at",
    )
    return {"kind": "estimated", "key": reference.key, **{k: reference.provenance.get(k) for k in keys}}
