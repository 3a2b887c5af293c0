"""The ``Problem`` contract: a transdimensional target on a saturated space.

A problem is data plus a log density. Models are addressed by ``model_index``
(int64 tensors); parameters by saturated vectors ``theta`` of shape
``[B, dim_max]`` in the problem's unconstrained space, of which only the
coordinates in ``mask(model_index)`` are active. Everything is batched and
differentiable in torch; float64 is the default, float32 is allowed.

A problem without exact answers is scored against its stored reference. The store that reads it
(:mod:`suite.store.references`) sits above the contracts and installs its reader here when imported
(:func:`install_reference_reader`; ``problems`` imports it), so the contracts never import the store.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import Tensor

from suite.core.backend import TORCH
from suite.core.model_space import ModelSpace
from suite.core.types import Draws, Estimate, ModelProbs


class StoredReference(Protocol):
    """What a problem reads from its stored reference: model probabilities and the gold draws' halves."""

    def model_probs(self) -> ModelProbs:
        """p(m | D) with its Monte Carlo standard errors."""
        ...

    def draws(self, num_draws: int, generator: torch.Generator, split: str = "all") -> Draws:
        """A random subset of the stored draws (``split``: ``"train"``, ``"test"`` or ``"all"``)."""
        ...


#: Reads a problem's stored reference (None when it has none); the store installs it (dependency inversion).
ReferenceReader = Callable[["Problem"], StoredReference | None]
_reference_reader: ReferenceReader | None = None


def install_reference_reader(reader: ReferenceReader) -> None:
    """Make ``reader`` the source of :meth:`Problem.stored_reference` (``suite.store.references`` installs its own)."""
    global _reference_reader
    _reference_reader = reader


class Problem(ABC):
    """A target pi(m, theta_m) proportional to p(D | m, theta_m) p(theta_m | m) p(m)."""

    #: Registry name; also the stable name of this log density.
    name: ClassVar[str]
    #: Metric the leaderboard sorts by (lower is better).
    main_metric: ClassVar[str] = "model_prob_tv"

    model_space: ModelSpace
    dim_max: int
    #: Data points in the likelihood, where the problem states it (optional; the VTI surrogate's ``gmm-reference``
    #: preset divides ELBOs by it, as the GMM code reference does).
    num_observations: int | None = None

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """The constructor arguments that define this problem instance (recorded with results)."""
        return {}

    @abstractmethod
    def mask(self, model_index: Tensor) -> Tensor:
        """Active coordinates of each model: bool ``[B, dim_max]``."""

    @abstractmethod
    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Model prior log-probability log p(m), float64 ``[B]``."""

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """Log joint log p(D, theta_m, m) in ``theta``'s dtype, ``[B]``; inactive coordinates ignored.

        Includes the model prior, the parameter prior (with the Jacobian of the
        unconstraining transform, if any) and the likelihood. Returns ``-inf``
        where the density is zero or not finite. By default this is
        ``log_joint_with`` on the torch backend.
        """
        return self.log_joint_with(TORCH, model_index, theta)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """The log joint written once against the backend namespace ``xp`` (``suite.core.backend``: torch or JAX).

        ``log_joint`` is then ``log_joint_with(TORCH, ...)``, and the reference
        engine evaluates the same definition in JAX. Problems that only have a
        torch ``log_joint`` cannot be given NUTS/SMC references.
        """
        raise NotImplementedError(f"{type(self).__name__} has no backend-agnostic log_joint_with")

    # ------------------------------------------------ optional: prior, for SMC
    def log_prior_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(theta_m | m) of the active unconstrained coordinates (transform Jacobian included), ``[B]``.

        Optional. With :meth:`sample_prior` it lets the reference engine temper
        from the prior to the posterior (the likelihood is then ``log_joint -
        log_model_prior - log_prior``); without it the engine tempers from a
        Student-t fitted to NUTS draws.
        """
        raise NotImplementedError(f"{type(self).__name__} has no log_prior_with")

    def sample_prior(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """Draws theta ~ p(theta_m | m) in the unconstrained space, float64 ``[B, dim_max]``, inactive entries zero."""
        raise NotImplementedError(f"{type(self).__name__} has no sample_prior")

    @property
    def has_prior(self) -> bool:
        """Whether :meth:`log_prior_with` and :meth:`sample_prior` are implemented."""
        cls = type(self)
        return cls.log_prior_with is not Problem.log_prior_with and cls.sample_prior is not Problem.sample_prior

    # ------------------------- optional: hierarchical structure, for model-informed variational families
    def latent_order(self) -> Tensor | None:
        """A topological order of the saturated coordinates (int64 permutation, parents first), or None if unstated."""
        return None

    def prior_location_scale(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """Prior mean ``f_i`` and log standard deviation ``log g_i`` of each coordinate given its parents.

        Optional (MIF paper sec. 2: z_i ~ N(f_i(pa(z_i)), g_i(pa(z_i))^2)). Both are ``[B, dim_max]`` in
        ``theta``'s dtype; entry i may depend only on coordinates before i in :meth:`latent_order`.
        Coordinates whose prior is not Gaussian report ``f = 0, log g = 0`` (an identity VIP map).
        """
        raise NotImplementedError(f"{type(self).__name__} has no prior_location_scale")

    @property
    def has_prior_location_scale(self) -> bool:
        """Whether :meth:`prior_location_scale` is implemented."""
        return type(self).prior_location_scale is not Problem.prior_location_scale

    def context(self, model_index: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
        """Features describing each model for conditional flows, ``[B, context_dim]`` (default: the mask)."""
        return self.mask(model_index).to(dtype)

    @property
    def context_dim(self) -> int:
        """Width of :meth:`context`."""
        return self.dim_max

    # --------------------------------------------------------------- ground truth
    def reference_model_probs(self) -> ModelProbs | None:
        """Ground-truth model probabilities, or None when unknown.

        Problems with exact answers override this; by default it is the stored
        estimate of the reference engine (:mod:`suite.reference`), with its
        Monte Carlo standard errors, or None when none is stored.
        """
        reference = self.stored_reference()
        return None if reference is None else reference.model_probs()

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws | None:
        """Gold-standard draws (m, theta_m) from the target in float64, or None when unavailable.

        These are the draws methods are scored on. By default a random subset
        of the "test" half of the stored reference's draws (at most as many as
        it holds).
        """
        reference = self.stored_reference()
        return None if reference is None else reference.draws(num_draws, generator, split="test")

    def training_draws(self, num_draws: int, generator: torch.Generator) -> Draws | None:
        """Posterior draws (m, theta_m) for methods that learn from samples (TRJ's transports), or None.

        They never overlap the draws of :meth:`reference_draws`: by default the
        "train" half of the stored reference's draws; problems with exact
        samplers draw afresh with ``generator``.
        """
        reference = self.stored_reference()
        if reference is not None:
            return reference.draws(num_draws, generator, split="train")
        return self.reference_draws(num_draws, generator)

    def exact_entropy(self) -> float | None:
        """Exact joint entropy H(m, theta) = H(m) + sum_m p(m) H(theta_m | m) of the target, or None when unknown.

        In the unconstrained coordinates of ``theta`` (active coordinates only). With it the runner reports
        ``kl_joint`` = cross-entropy - H = KL(pi || q) over (m, theta).
        """
        return None

    def exact_log_evidence(self) -> float | None:
        """Exact log normalising constant log Z = log sum_m int exp(log_joint(m, theta)) dtheta, or None when unknown.

        With it the runner reports ``kl_reverse`` = -ELBO + log Z = KL(q || pi).
        """
        return None

    #: The run profile whose reference size this instance asks for (None: quick); see :meth:`use_reference_profile`.
    reference_profile: str | None = None

    def use_reference_profile(self, profile: str | None) -> None:
        """Ask for the stored reference sized for ``profile`` (paper runs look for a paper-size one first)."""
        if profile != self.reference_profile:
            self.reference_profile = profile
            self.__dict__.pop("_stored_reference", None)

    def stored_reference(self) -> StoredReference | None:
        """The stored reference estimate of this instance (``suite.store.references.Reference``) or None.

        Read by the reader :func:`install_reference_reader` installed (None when none is: the store lives above
        the contracts, and importing ``problems`` or ``suite.store`` installs it).
        """
        if _reference_reader is None:
            return None
        if not hasattr(self, "_stored_reference"):
            self._stored_reference = _reference_reader(self)
        return self._stored_reference

    # ------------------------------------------------- optional: problem-specific scores and pictures
    #: Problem-specific metrics (from :meth:`task_metrics`) where higher is better (e.g. an F1 score).
    higher_is_better: ClassVar[frozenset[str]] = frozenset()
    #: Profiles in which ``run_all.py --problems all`` plans this problem (naming it runs it in any profile). Named
    #: ``profiles`` before (``Method.profiles`` is a method's table of presets): a subclass that still sets
    #: ``profiles`` gets it here, with a DeprecationWarning.
    planned_in: ClassVar[tuple[str, ...]] = ("smoke", "quick", "paper")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "profiles" in vars(cls):  # the old name of planned_in (kept for one release)
            warnings.warn(
                f"{cls.__qualname__}.profiles is deprecated: name the profiles that plan the problem planned_in",
                DeprecationWarning,
                stacklevel=2,
            )
            cls.planned_in = tuple(vars(cls)["profiles"])

    #: Names of groups this problem belongs to: ``--problems GROUP`` selects every registered member (e.g.
    #: ``classics``, the field's classic data sets). A group name must not be a problem's name.
    groups: ClassVar[tuple[str, ...]] = ()

    #: Compute seconds every method gets on this problem, per profile (equal-time comparison); a profile not listed
    #: runs the methods' iteration counts. Only ``quick`` is timed: ``smoke`` must stay seconds, ``paper`` keeps
    #: the papers' iteration counts.
    time_budgets: ClassVar[dict[str, float]] = {"quick": 10.0}
    #: Data sets ``run_all.py`` plans per profile (``data_seed`` first_data_seed .. first_data_seed + n - 1, each its
    #: own problem instance); a profile not listed plans the one data set of the problem's ``data_seed``.
    data_sets: ClassVar[dict[str, int]] = {}
    first_data_seed: ClassVar[int] = 0
    #: (sweep name, x) when this problem is one point of a sweep reported across problems (``suite.report.sweeps``).
    sweep: ClassVar[tuple[str, int] | None] = None

    def task_metrics(self, model_probs: ModelProbs | None, draws: Draws | None) -> dict[str, Estimate]:
        """Scores of a result that only this problem defines (DAG edge F1, q(k) at the true k, ...); none by default.

        ``model_probs`` and ``draws`` are the method's reported q(m) and posterior draws (either may be None).
        """
        return {}

    def plot_result(self, model_probs: ModelProbs | None, draws: Draws | None, path: Path) -> Path | None:
        """Save a picture of one result to ``path`` (e.g. a posterior predictive density); None if there is none."""
        return None

    # ------------------------------------------------------------------ helpers
    @property
    def num_models(self) -> int | None:
        """Number of models, or None when not enumerable."""
        return self.model_space.num_models

    def model_dim(self, model_index: Tensor) -> Tensor:
        """Number of active coordinates of each model (int64 ``[B]``)."""
        return self.mask(model_index).sum(-1)

    def unavailable_reason(self) -> str | None:
        """Why this problem cannot run here (e.g. a missing data file), or None."""
        return None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"


@runtime_checkable
class ExactTransport(Protocol):
    """Optional capability: exact transport maps between each pi(theta | m) and N(0, I).

    ``to_reference`` maps target to reference, ``from_reference`` the reverse;
    both act on the active coordinates of saturated vectors (inactive ones
    pass through) and return the log absolute Jacobian determinant of the map
    they apply.
    """

    def to_reference(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """z = T_m(theta) and log |det dT_m/dtheta|."""
        ...

    def from_reference(self, model_index: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """theta = T_m^{-1}(z) and log |det dT_m^{-1}/dz|."""
        ...


LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def std_normal_log_prob(x: Tensor) -> Tensor:
    """Elementwise log N(x; 0, 1)."""
    return -0.5 * x * x - LOG_SQRT_2PI
