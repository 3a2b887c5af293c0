"""MADE+: an autoregressive distribution over mixed categorical/binary model identifiers (VTI App. F.7-F.8).

The identifier is a vector of V discrete variables with cardinalities K_v (for
DAGs: d - 1 Lehmer digits with d, ..., 2 outcomes, then d(d-1)/2 edge bits).
One masked MLP (:class:`methods.flows.made.MADEPlus`) reads the values and emits,
for each variable, K_v logits (a categorical; binary variables get one Bernoulli
logit), each depending only on earlier variables: the output units of variable v
repeat its degree v + 1 (the per-dimension output multiplier r(v) of App. F.8). Settings follow the
authors' SFEMADEDAG (methods spec 4.5): hidden width ub2(total outputs),
2 + (d - 1) // 2 residual blocks, ReLU, final layer zero-initialised (uniform
q), sampling digits first and then bits, V sequential passes.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor
from torch.func import functional_call

from methods.flows.made import IncrementalMADE, MADEPlus
from methods.vti.model_samplers import LOGIT_CLAMP, AutoregressiveSampler, LogPriorFn


@runtime_checkable
class DiscreteVectorSpace(Protocol):
    """A model space whose indices are vectors of discrete variables (e.g. ``PermutationDAGSpace``)."""

    #: Outcomes of each variable, in autoregressive order.
    cardinalities: list[int]

    def to_variables(self, model_index: Tensor) -> Tensor:
        """Variable values ``[B, V]`` (int64) of model indices."""
        ...

    def from_variables(self, values: Tensor) -> Tensor:
        """Model indices of variable values ``[B, V]``."""
        ...


def default_sfe_lr(num_nodes: int) -> float:
    """The authors' score-function learning rate for a d-node DAG (methods spec 4.5, ``get_sfe_lr``)."""
    table = {3: 1e-1, 4: 5e-2, 5: 1e-2, 6: 5e-3, 7: 1e-3, 8: 1e-3, 9: 5e-4, 10: 1e-4}
    return table.get(num_nodes, 1e-1 if num_nodes < 3 else 1e-5)


class MADEPlusSampler(AutoregressiveSampler):
    """q_psi(m) = prod_v q(x_v | x_<v) with a MADE+ over the variables of a ``DiscreteVectorSpace``.

    The entropy in the step control is the importance-sampling estimate with full weights q_psi'/q_psi on the
    current batch, as for :class:`~methods.vti.model_samplers.MADEBinarySampler`. It never enumerates: q(m) is
    reported at drawn models.
    """

    def __init__(
        self,
        space: DiscreteVectorSpace,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        *,
        log_model_prior_fn: LogPriorFn,
        sfe_lr: float = 1e-1,
        ig_threshold: float = 5e-3,
        baseline_decay: float = 0.9,
        hidden: int | None = None,
        num_blocks: int | None = None,
    ) -> None:
        cards = list(space.cardinalities)
        super().__init__(
            math.prod(cards),
            None,
            device,
            dtype,
            log_model_prior_fn=log_model_prior_fn,
            sfe_lr=sfe_lr,
            ig_threshold=ig_threshold,
            baseline_decay=baseline_decay,
        )
        self.space = space
        self.cardinalities = cards
        num_digits = sum(1 for k in cards if k > 2)
        outputs = sum(k if k > 2 else 1 for k in cards)
        hidden = hidden or 1 << max(outputs - 1, 0).bit_length()
        self.made = MADEPlus(cards, hidden, num_blocks or 2 + num_digits // 2, LOGIT_CLAMP).to(self.device, dtype)
        # Logit table: categorical v reads its K_v outputs, padded with -inf to the largest K; binary v reads
        # [0, logit] (log-odds of outcome 1 against 0), so one log-softmax serves both kinds.
        k_max = max(max(cards), 2)
        starts = torch.cumsum(torch.tensor([0, *self.made.widths[:-1]]), 0)
        gather = torch.full((len(cards), k_max), outputs, dtype=torch.int64)  # -> -inf column
        for v, (k, start) in enumerate(zip(cards, starts.tolist(), strict=True)):
            if k > 2:
                gather[v, :k] = torch.arange(start, start + k)
            else:
                gather[v, 0], gather[v, 1] = outputs + 1, start  # zero column, then the logit
        self.register_buffer("gather", gather.to(self.device))

    def _log_probs(self, values: Tensor, params: dict[str, Tensor] | None) -> Tensor:
        """log q(x_v = k | x_<v) for every variable and outcome, ``[B, V, K_max]``."""
        raw = self(values) if params is None else functional_call(self, params, (values,))
        pad = torch.tensor([-math.inf, 0.0], device=raw.device, dtype=raw.dtype).expand(raw.shape[0], 2)
        logits = torch.cat([raw, pad], -1)[:, self.gather]
        return torch.log_softmax(logits, -1)

    def forward(self, values: Tensor) -> Tensor:
        """Raw MADE+ outputs for variable values (for functional calls)."""
        return self.made(values.to(self.dtype))

    def _log_q(self, model_index: Tensor, params: dict[str, Tensor] | None = None) -> Tensor:
        values = self.space.to_variables(model_index)
        log_probs = self._log_probs(values, params)
        return log_probs.gather(-1, values[..., None]).squeeze(-1).sum(-1)

    @torch.no_grad()
    def sample(
        self, num: int, generator: torch.Generator | None = None, incremental: bool = True
    ) -> tuple[Tensor, Tensor]:
        """m ~ q_psi variable by variable, with log q(m): hidden units filled incrementally (about one MADE+ pass
        in all, :class:`~methods.flows.made.IncrementalMADE`), or with ``incremental=False`` one pass per
        variable."""
        values = torch.zeros(num, len(self.cardinalities), dtype=torch.int64, device=self.device)
        inputs = torch.zeros(num, len(self.cardinalities), dtype=self.dtype, device=self.device)
        log_q = torch.zeros(num, device=self.device, dtype=self.dtype)
        engine = IncrementalMADE.of_made_plus(self.made, num) if incremental else None
        start = 0
        for v, (k, width) in enumerate(zip(self.cardinalities, self.made.widths, strict=True)):
            rows = slice(start, start + width)
            if engine is None:
                out = self.made.outputs_of(self.made.features(inputs), rows)
            else:
                clamp = self.made.logit_clamp
                out = engine.outputs(inputs, v, rows).clamp(-clamp, clamp)
            start += width
            log_p = torch.log_softmax(out if k > 2 else torch.cat([torch.zeros_like(out), out], -1), -1)
            pick = torch.multinomial(log_p.exp(), 1, generator=generator).squeeze(-1)
            values[:, v] = pick
            inputs[:, v] = pick.to(self.dtype)
            log_q += log_p.gather(-1, pick[:, None]).squeeze(-1)
        return self.space.from_variables(values), log_q

    @property
    def can_enumerate(self) -> bool:
        """Never: the identifier space is far too large."""
        return False

    def posterior_log_probs(self) -> Tensor:
        """Not available (the space is not enumerable)."""
        raise ValueError("MADE+ spaces are not enumerable; use sample() and log_prob() at drawn models")
