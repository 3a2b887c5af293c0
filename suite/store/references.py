"""On-disk references: model probabilities, evidences and gold draws with their Monte Carlo error and provenance.

A reference is keyed by the problem's name and a hash of its configuration (and of its evidence method when that is
not plain SMC: ``reference_settings["evidence"]``), so a problem built with other constants, or asking for another
estimator, never picks up a stale answer. It is two files in ``<folder>/<problem>/``: ``<key>.npz`` (arrays) and
``<key>.json`` (provenance: how it was made, settings, seeds, versions, diagnostics). A profile-dependent reference
records its size (:attr:`Reference.profile`; ``paper`` ones are ``<key>.paper.npz``); a problem asks for its
profile's size first (:func:`reference_size`), and a run scored against another size says so (:func:`describe`).

Search path, in order (:func:`search_path`; the first folder holding the key wins; a run's record names the folder,
the file's path in it and its checksums, :func:`describe`): each folder of the ``TDBENCH_REFERENCES`` environment
variable (``os.pathsep``-separated), then ``suite/reference/shipped/`` (:data:`SHIPPED_DIR`, package data). A
problem whose stored reference is missing is reported unavailable by :func:`reference_problem`, with
:func:`missing_message`: it is never run with its accuracy metrics silently left out.

Every reference is validated when read (files, shapes, probabilities, standard errors, gold draws, the json's
problem, configuration and key, the SHA-256 of the arrays); one that fails is refused with
:class:`InvalidReferenceError` naming the file, and its problem is reported unavailable rather than scored against it.
Details: docs/problems.md, "Ground truth" ("Two sizes" and "`suite/store/references.py`").
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from suite.core.files import read_regular_bytes
from suite.core.problem import install_reference_reader
from suite.core.types import Draws, ModelProbs

if TYPE_CHECKING:
    from suite.core.problem import Problem

#: The shipped references: package data inside ``suite.reference`` (listed in pyproject's package-data).
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "reference" / "shipped"
ENV_VAR = "TDBENCH_REFERENCES"
FORMAT_VERSION = 1
#: Largest reference files read: the arrays (the shipped ones are at most a few MB) and the description beside them.
MAX_REFERENCE_BYTES = 4 * 1024**3
MAX_REFERENCE_JSON_BYTES = 64 * 1024 * 1024
#: Largest allowed |sum of p(m | D) - 1| of a stored reference.
PROB_SUM_TOLERANCE = 1e-6
#: Arrays every reference holds (``model_index`` is optional).
REQUIRED_ARRAYS = (
    "log_evidence",
    "log_evidence_se",
    "log_model_prior",
    "prob",
    "prob_se",
    "gold_model_index",
    "gold_theta",
)
#: The json key holding the checksum of the arrays.
CHECKSUM_KEY = "arrays_sha256"
#: Reference sizes (the profiles a gold standard can be made for), and the size each run profile asks for.
SIZES = ("quick", "paper")
SIZE_OF_PROFILE = {"smoke": "quick", "quick": "quick", "paper": "paper"}


def reference_size(profile: str | None) -> str:
    """The reference size a run in ``profile`` asks for (``quick`` unless the profile is ``paper``)."""
    return SIZE_OF_PROFILE.get(profile or "quick", "quick")


def file_stem(key: str, size: str | None) -> str:
    """A reference file's name without suffix: ``<key>`` (quick, or one size for all) or ``<key>.paper``."""
    return key if size in (None, "quick") else f"{key}.{size}"


class InvalidReferenceError(ValueError):
    """A stored reference that cannot be used: unreadable, inconsistent, of another problem, or altered."""


def arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the arrays in name order: each one's name, dtype, shape and C-order bytes."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _key(name: str, config: dict[str, Any], evidence: str) -> str:
    """Hash of name, configuration and (unless "smc", so that older keys stay valid) the evidence method."""
    content: dict[str, Any] = {"name": name, "config": config}
    if evidence != "smc":
        content["evidence"] = evidence
    payload = json.dumps(content, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def evidence_method(problem: Problem) -> str:
    """The estimator a reference asks for: "smc", "bridge", "both", "quadrature" (per model), "rjmcmc" or "none"."""
    return getattr(problem, "reference_settings", {}).get("evidence", "smc")


def reference_key(problem: Problem) -> str:
    """Stable key of a problem instance: a hash of its name, configuration and evidence method."""
    return _key(problem.name, problem.config(), evidence_method(problem))


def search_path() -> list[Path]:
    """Folders searched for references, in order: ``TDBENCH_REFERENCES``'s, then :data:`SHIPPED_DIR`."""
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
    #: Where a reference read from disk came from (:func:`source_of`): its search folder, its path relative to that
    #: folder and the SHA-256 of the npz and json bytes that were read and validated. Empty when made in memory.
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Hash of problem name, configuration and evidence method."""
        return _key(self.problem, self.config, self.provenance.get("evidence", "smc"))

    @property
    def profile(self) -> str | None:
        """The size it was made for (``quick`` or ``paper``), or None when its size does not depend on the profile."""
        size = self.provenance.get("profile", (self.provenance.get("settings") or {}).get("profile"))
        return size if size in SIZES else None

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
        """Write ``<folder>/<problem>/<stem>.npz`` and ``.json`` atomically (``file_stem``); returns the npz path."""
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
        meta = {
            "format": FORMAT_VERSION,
            "problem": self.problem,
            "config": self.config,
            CHECKSUM_KEY: arrays_sha256(arrays),
            **{k: v for k, v in self.provenance.items() if k != CHECKSUM_KEY},
        }
        stem = file_stem(self.key, self.profile)
        npz_path, json_path = target / f"{stem}.npz", target / f"{stem}.json"
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
        """Load and validate a reference from its npz file and the json beside it (InvalidReferenceError: bad)."""
        npz_path = Path(npz_path)
        meta, data, digests = _read_files(npz_path)
        _check_contents(npz_path, meta, data)
        stored = meta.get(CHECKSUM_KEY)
        json_path = npz_path.with_suffix(".json")
        if stored is None:
            raise InvalidReferenceError(
                f"reference {json_path} has no {CHECKSUM_KEY} checksum (written before checksums were kept): check "
                f"it, then add one with `python -m suite.reference {meta['problem']} --add-checksum`, or regenerate "
                "it with --force"
            )
        if stored != arrays_sha256(data):
            raise InvalidReferenceError(
                f"reference {npz_path} does not match the {CHECKSUM_KEY} checksum in {json_path.name}: its arrays "
                "were altered or damaged; regenerate it (python -m suite.reference PROBLEM --force)"
            )
        provenance = {k: v for k, v in meta.items() if k not in ("format", "problem", "config", CHECKSUM_KEY)}
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
            source={**source_of(npz_path), **digests, CHECKSUM_KEY: stored},
        )


def source_of(npz_path: Path) -> dict[str, Any]:
    """Which search folder holds ``npz_path`` and the path relative to it, for run records.

    ``search_folder`` is ``TDBENCH_REFERENCES`` (with ``search_folder_entry``, its position in the variable, and
    ``search_folder_path``, the folder as named there), ``shipped`` (:data:`SHIPPED_DIR`) or ``other`` (a file read
    from elsewhere: ``path`` is then absolute). Paths are compared as written, without following links, so a link in
    a folder is reported as that folder's file.
    """
    path = Path(os.path.abspath(npz_path))
    entries = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    candidates = [(ENV_VAR, i, entry) for i, entry in enumerate(entries)] + [("shipped", None, str(SHIPPED_DIR))]
    for kind, entry_number, folder in candidates:
        try:
            relative = path.relative_to(os.path.abspath(folder))
        except ValueError:
            continue
        out: dict[str, Any] = {"search_folder": kind, "path": relative.as_posix()}
        if kind == ENV_VAR:
            out.update(search_folder_entry=entry_number, search_folder_path=folder)
        return out
    return {"search_folder": "other", "path": path.as_posix()}


def _read_files(npz_path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, str]]:
    """The json (an object with format, problem and config), the arrays and the files' SHA-256 of a reference.

    The checksums are ``sha256`` (the npz) and ``json_sha256``, of exactly the bytes read, validated and used (each
    file is read once). Refused (InvalidReferenceError) when unreadable.
    """
    json_path = npz_path.with_suffix(".json")
    try:
        json_bytes = read_regular_bytes(json_path, MAX_REFERENCE_JSON_BYTES, follow_links=True)
        meta = json.loads(json_bytes.decode())
    except FileNotFoundError:
        raise InvalidReferenceError(f"reference {npz_path} has no {json_path.name} beside it") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidReferenceError(f"unreadable reference {json_path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(meta, dict):
        raise InvalidReferenceError(f"invalid reference {json_path}: a JSON {type(meta).__name__}, not an object")
    if meta.get("format") != FORMAT_VERSION:
        raise InvalidReferenceError(f"reference {json_path}: format {meta.get('format')!r} != {FORMAT_VERSION}")
    if not isinstance(meta.get("problem"), str) or not isinstance(meta.get("config"), dict):
        raise InvalidReferenceError(f"invalid reference {json_path}: needs a problem name and a config object")
    try:
        npz_bytes = read_regular_bytes(npz_path, MAX_REFERENCE_BYTES, follow_links=True)
        with np.load(io.BytesIO(npz_bytes), allow_pickle=False) as arrays:
            data = {k: arrays[k] for k in arrays.files}
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error) as exc:
        raise InvalidReferenceError(f"unreadable reference {npz_path}: {type(exc).__name__}: {exc}") from None
    digests = {"sha256": hashlib.sha256(npz_bytes).hexdigest(), "json_sha256": hashlib.sha256(json_bytes).hexdigest()}
    return meta, data, digests


def _check_contents(npz_path: Path, meta: dict[str, Any], data: dict[str, np.ndarray]) -> None:
    """Refuse arrays that are missing, of inconsistent shapes or invalid values, or a json not matching its key."""

    def bad(why: str) -> InvalidReferenceError:
        return InvalidReferenceError(f"invalid reference {npz_path}: {why}")

    missing = [name for name in REQUIRED_ARRAYS if name not in data]
    if missing:
        raise bad(f"missing array(s) {', '.join(missing)}")
    for name in [*REQUIRED_ARRAYS, "model_index"]:
        kind = "iu" if name in ("gold_model_index", "model_index") else "f"
        if name in data and data[name].dtype.kind not in kind:
            raise bad(f"{name} has dtype {data[name].dtype}")
    prob = data["prob"]
    if prob.ndim != 1 or len(prob) == 0:
        raise bad(f"prob must be a non-empty vector, has shape {prob.shape}")
    k = len(prob)
    for name in ("log_evidence", "log_evidence_se", "log_model_prior", "prob_se", "model_index"):
        if name in data and data[name].shape != (k,):
            raise bad(f"{name} has shape {data[name].shape}, prob has {(k,)}")
    n = len(data["gold_model_index"])
    if data["gold_model_index"].ndim != 1 or data["gold_theta"].ndim != 2 or data["gold_theta"].shape[0] != n:
        raise bad(f"gold_model_index {data['gold_model_index'].shape} and gold_theta {data['gold_theta'].shape} differ")
    if not np.all(np.isfinite(prob)) or np.any(prob < 0):
        raise bad("prob holds NaN, infinite or negative values")
    if abs(float(prob.sum()) - 1.0) > PROB_SUM_TOLERANCE:
        raise bad(f"prob sums to {float(prob.sum())!r}, not 1 (within {PROB_SUM_TOLERANCE})")
    if not np.all(np.isfinite(data["prob_se"])) or np.any(data["prob_se"] < 0):
        raise bad("prob_se holds NaN, infinite or negative values")
    evidence, evidence_se = data["log_evidence"], data["log_evidence_se"]
    none = np.isnan(evidence)  # an MCMC reference estimates no evidences: NaN with NaN errors
    if np.any(np.isinf(evidence)) or np.any(np.isnan(evidence_se) != none):
        raise bad("log_evidence is infinite, or its standard error is NaN where it is not (or the reverse)")
    if not np.all(np.isfinite(evidence_se[~none])) or np.any(evidence_se[~none] < 0):
        raise bad("log_evidence_se holds infinite or negative values")
    if not np.all(np.isfinite(data["log_model_prior"])):
        raise bad("log_model_prior holds NaN or infinite values")
    models = np.arange(k) if "model_index" not in data else data["model_index"]
    if np.any(models < 0) or len(np.unique(models)) != k:
        raise bad("model_index holds negative or repeated models")
    if not np.all(np.isin(data["gold_model_index"], models)):
        raise bad("gold_model_index holds models the reference does not list")
    if not np.all(np.isfinite(data["gold_theta"])):
        raise bad("gold_theta holds NaN or infinite values")
    key = _key(meta["problem"], meta["config"], meta.get("evidence", "smc"))
    size = meta.get("profile", (meta.get("settings") or {}).get("profile"))
    stem = file_stem(key, size if size in SIZES else None)
    if npz_path.stem != stem:
        raise bad(f"its json describes {meta['problem']!r} with key {key} (file {stem}.npz), not {npz_path.name}")


def add_checksum(npz_path: Path) -> str:
    """Validate a reference written before checksums were kept and store the checksum of its arrays in its json.

    The arrays are left untouched; the json is rewritten (atomically) with ``arrays_sha256`` added after its config.
    A reference that already has a checksum is verified instead (InvalidReferenceError when it does not match).
    Returns the checksum.
    """
    npz_path = Path(npz_path)
    meta, data, _ = _read_files(npz_path)
    _check_contents(npz_path, meta, data)
    digest = arrays_sha256(data)
    if CHECKSUM_KEY in meta:
        Reference.read(npz_path)  # verifies it
        return digest
    order = list(meta)
    at = order.index("config") + 1
    updated = {name: meta[name] for name in order[:at]} | {CHECKSUM_KEY: digest}
    updated |= {name: meta[name] for name in order[at:]}
    json_path = npz_path.with_suffix(".json")
    fd, tmp = tempfile.mkstemp(dir=json_path.parent, prefix=f".{json_path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(updated, indent=1, default=str))
        os.replace(tmp, json_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digest


def wanted_size(problem: Problem) -> str:
    """The reference size ``problem`` asks for (its run profile's, see ``Problem.use_reference_profile``)."""
    return reference_size(getattr(problem, "reference_profile", None))


def find(problem: Problem, size: str | None = None) -> Path | None:
    """Path of the stored reference of this problem instance, or None.

    The size asked for (``size``, else the problem's :func:`wanted_size`) is searched for in every folder first,
    then the other sizes (a paper run with only a quick reference is scored against it, and its record says so).
    """
    key, first = reference_key(problem), size or wanted_size(problem)
    for stem in dict.fromkeys(file_stem(key, s) for s in (first, *SIZES)):
        for folder in search_path():
            path = folder / problem.name / f"{stem}.npz"
            if path.exists():
                return path
    return None


def find_exact(problem: Problem, size: str | None) -> Path | None:
    """Path of the stored reference of exactly ``size`` (None: the one-size file ``<key>.npz``), or None."""
    stem = file_stem(reference_key(problem), size)
    return next((p for f in search_path() if (p := f / problem.name / f"{stem}.npz").exists()), None)


def load(problem: Problem) -> Reference | None:
    """The stored reference of this problem instance, or None when there is none; InvalidReferenceError when bad."""
    path = find(problem)
    if path is None:
        return None
    reference = Reference.read(path)
    if reference.problem != problem.name:
        raise InvalidReferenceError(f"reference {path} is of problem {reference.problem!r}, not {problem.name!r}")
    asked = json.loads(json.dumps(problem.config(), sort_keys=True, default=str))
    if json.loads(json.dumps(reference.config, sort_keys=True, default=str)) != asked:
        raise InvalidReferenceError(
            f"reference {path} was made for configuration {reference.config}, not {problem.name}'s {problem.config()}"
        )
    if reference.gold_theta.shape[1] != problem.dim_max:
        raise InvalidReferenceError(
            f"invalid reference {path}: gold_theta has {reference.gold_theta.shape[1]} coordinates, "
            f"{problem.name} has {problem.dim_max}"
        )
    if reference.model_index is None and problem.num_models is not None and len(reference.prob) != problem.num_models:
        raise InvalidReferenceError(
            f"invalid reference {path}: {len(reference.prob)} model probabilities, {problem.name} has "
            f"{problem.num_models} models"
        )
    return reference


def needs_stored_reference(problem: Problem) -> bool:
    """Whether ``problem``'s ground truth is a stored estimate (not exact, and not declared impossible)."""
    return not has_exact_reference(problem) and evidence_method(problem) != "none"


def reference_problem(problem: Problem) -> str | None:
    """Why ``problem`` cannot be scored against its ground truth, or None (a valid reference, exact, or none).

    A required reference that is missing gives :func:`missing_message`; one that is invalid, the reason naming the file.
    """
    if not needs_stored_reference(problem):
        return None
    if find(problem) is None:
        return missing_message(problem)
    try:
        problem.stored_reference()
    except InvalidReferenceError as exc:
        return str(exc)
    return None


def missing_message(problem: Problem) -> str:
    """Why a problem has no stored reference and how to make one: the key, the command and the folders searched."""
    command = getattr(problem, "reference_command", None) or f"python -m suite.reference {problem.name}"
    return (
        f"no stored reference for {problem.name!r} (key {reference_key(problem)}); generate it with "
        f"`{command}`, or point {ENV_VAR} at a folder holding it "
        f"(searched: {', '.join(map(str, search_path()))})"
    )


def has_exact_reference(problem: Problem) -> bool:
    """Whether the problem computes its ground truth itself (exact answers always win over estimates).

    That is, whether the class's ``reference_model_probs`` is another function than the one of the base class that
    declares it (the last class of the MRO that defines it: ``Problem``, which this module cannot import).
    """
    owners = [cls for cls in type(problem).__mro__ if "reference_model_probs" in vars(cls)]
    return bool(owners) and type(problem).reference_model_probs is not vars(owners[-1])["reference_model_probs"]


#: What a run record says of the file its estimated reference was read from (:func:`describe`, :func:`source_of`).
SOURCE_KEYS = (
    "search_folder",
    "search_folder_entry",
    "search_folder_path",
    "path",
    "sha256",
    "json_sha256",
    CHECKSUM_KEY,
)


def describe(problem: Problem) -> dict[str, Any]:
    """Where a problem's ground truth comes from, for run records: exact, estimated (with its error) or missing.

    An estimated one names the file the problem loaded (and is scored with): its search folder (``search_folder``:
    ``TDBENCH_REFERENCES`` with ``search_folder_entry`` and ``search_folder_path``, or ``shipped``), ``path`` relative
    to it, and the SHA-256 of the npz and json bytes read (``sha256``, ``json_sha256``) beside ``arrays_sha256``.
    """
    if has_exact_reference(problem):
        return {"kind": "exact"}
    if evidence_method(problem) == "none":
        return {"kind": "none", "message": getattr(problem, "reference_settings", {}).get("why", "")}
    path = find(problem)
    if path is None:
        return {"kind": "missing", "message": missing_message(problem)}
    # The reference the run was scored against (the problem's cached one), else the one found now.
    reference = problem.stored_reference()
    if not isinstance(reference, Reference) or not reference.source:
        reference = load(problem)
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
    wanted, made = wanted_size(problem), reference.profile
    sizes = {
        "size": made or "any",
        "size_wanted": wanted,
        "size_mismatch": made is not None and made != wanted,
        "file": Path(reference.source.get("path", path.name)).name,
    }
    # Which file exactly: its search folder, its path there and the checksums of the bytes read (see source_of).
    source = {k: reference.source.get(k) for k in SOURCE_KEYS if k in reference.source}
    return {
        "kind": "estimated",
        "key": reference.key,
        **sizes,
        **source,
        **{k: reference.provenance.get(k) for k in keys},
    }


install_reference_reader(load)
