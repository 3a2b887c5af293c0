"""Model spaces: countable sets of models indexed by non-negative integers.

A model is addressed in batched code by its integer ``model_index`` (a
``torch.int64`` tensor) and in files and tables by its natural ``identifier``
(a string such as ``"k=2"`` or a bit string).

Most spaces give each model one int64 (``index_width == 1``; a batch is ``[B]``).
Spaces too large for 63 bits (DAGs as a permutation plus edge bits) give each
model ``index_width`` int64 words (a batch is ``[B, index_width]``); such
spaces are never enumerable, and a single model is then a tuple of ints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


class ModelSpace(ABC):
    """A countable set of models with a random-walk jump distribution."""

    #: Number of models, or None when the space is too large to enumerate.
    num_models: int | None
    #: int64 words per model index: 1 (indices ``[B]``) or more (indices ``[B, index_width]``, never enumerable).
    index_width: int = 1

    @abstractmethod
    def identifier(self, index: Any) -> str:
        """Natural identifier of the model with this index (an int, or a tuple of ints for multi-word spaces)."""

    @abstractmethod
    def index(self, identifier: str) -> Any:
        """Index of the model with this identifier (an int, or a tuple of ints for multi-word spaces)."""

    @abstractmethod
    def sample_uniform(self, num: int, generator: torch.Generator) -> Tensor:
        """Draw ``num`` model indices uniformly at random (int64, on the generator's device)."""

    @abstractmethod
    def propose_jump(self, model_index: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Propose a different model for every entry.

        Returns the proposed indices and ``log j(m | m') - log j(m' | m)``, the
        log ratio of reverse to forward jump probabilities (zero when symmetric).
        """

    def all_indices(self, device: torch.device | str = "cpu") -> Tensor:
        """Every model index, in order; only for enumerable spaces."""
        if self.num_models is None:
            raise ValueError("this model space cannot be enumerated")
        return torch.arange(self.num_models, device=device)

    def check_indices(self, model_index: Tensor) -> None:
        """Raise ValueError if any index lies outside the space."""
        if model_index.dtype != torch.int64:
            raise TypeError(f"model_index must be int64, got {model_index.dtype}")
        expected = 1 if self.index_width == 1 else 2
        if model_index.ndim != expected or (expected == 2 and model_index.shape[-1] != self.index_width):
            shape = "[B]" if expected == 1 else f"[B, {self.index_width}]"
            raise ValueError(f"model_index must have shape {shape}, got {tuple(model_index.shape)}")
        if model_index.numel() and (
            model_index.min() < 0 or (self.num_models is not None and model_index.max() >= self.num_models)
        ):
            raise ValueError(f"model index out of range [0, {self.num_models})")


class CategoricalSpace(ModelSpace):
    """A small set of named models; jumps go uniformly to any other model."""

    def __init__(self, labels: Sequence[str]) -> None:
        if len(labels) < 1 or len(set(labels)) != len(labels):
            raise ValueError("labels must be a non-empty sequence of distinct strings")
        self.labels = list(labels)
        self.num_models = len(self.labels)
        self._lookup = {label: i for i, label in enumerate(self.labels)}

    def identifier(self, index: int) -> str:
        """Label of model ``index``."""
        return self.labels[int(index)]

    def index(self, identifier: str) -> int:
        """Index of the model labelled ``identifier``."""
        try:
            return self._lookup[identifier]
        except KeyError:
            raise KeyError(f"unknown model {identifier!r}; valid: {', '.join(self.labels)}") from None

    def sample_uniform(self, num: int, generator: torch.Generator) -> Tensor:
        """Uniform draws over the labels."""
        return torch.randint(0, self.num_models, (num,), generator=generator, device=generator.device)

    def propose_jump(self, model_index: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Uniform over the other models (symmetric)."""
        k = self.num_models
        if k == 1:
            return model_index.clone(), torch.zeros(model_index.shape, device=model_index.device)
        shift = torch.randint(1, k, model_index.shape, generator=generator, device=model_index.device)
        return (model_index + shift) % k, torch.zeros(model_index.shape, device=model_index.device)


class BinarySpace(ModelSpace):
    """All bit strings of a fixed length; jumps flip one uniformly chosen bit.

    The identifier's character ``j`` is bit ``j`` and the index is
    ``sum_j bit_j * 2**j`` (bit 0 is the least significant).
    """

    def __init__(self, num_bits: int) -> None:
        if not 1 <= num_bits <= 62:
            raise ValueError("num_bits must lie in [1, 62] so that indices fit in int64")
        self.num_bits = num_bits
        self.num_models = 2**num_bits

    def identifier(self, index: int) -> str:
        """Bit string of model ``index``, bit 0 first."""
        index = int(index)
        return "".join("1" if (index >> j) & 1 else "0" for j in range(self.num_bits))

    def index(self, identifier: str) -> int:
        """Index of a bit string written bit 0 first."""
        if len(identifier) != self.num_bits or set(identifier) - {"0", "1"}:
            raise KeyError(f"expected a string of {self.num_bits} characters 0/1, got {identifier!r}")
        return sum(1 << j for j, c in enumerate(identifier) if c == "1")

    def bits(self, model_index: Tensor) -> Tensor:
        """Bits of each index as a bool tensor ``[..., num_bits]``."""
        shifts = torch.arange(self.num_bits, device=model_index.device)
        return (model_index.unsqueeze(-1) >> shifts) & 1 == 1

    def sample_uniform(self, num: int, generator: torch.Generator) -> Tensor:
        """Uniform draws over all bit strings."""
        return torch.randint(0, self.num_models, (num,), generator=generator, device=generator.device)

    def propose_jump(self, model_index: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Flip one uniformly chosen bit (symmetric)."""
        bit = torch.randint(0, self.num_bits, model_index.shape, generator=generator, device=model_index.device)
        return model_index ^ (1 << bit), torch.zeros(model_index.shape, device=model_index.device)


class CountSpace(ModelSpace):
    """The counts ``low, low + 1, ..., high`` (change points, components, an AR order); jumps go to a neighbour.

    Index ``i`` is the count ``low + i`` and its identifier ``"<label>=<count>"`` (``"k=3"``). A jump moves up or
    down by one with probability 1/2 each, and from an end of the range to its only neighbour (probability 1),
    which is Green (1995)'s birth-death move between neighbouring dimensions; the log ratio says so.
    """

    def __init__(self, low: int, high: int, label: str = "k") -> None:
        if not (isinstance(low, int) and isinstance(high, int)) or not 0 <= low <= high:
            raise ValueError(f"need integers 0 <= low <= high; got low={low!r}, high={high!r}")
        if not label.isidentifier():
            raise ValueError(f"label must be a short name such as 'k'; got {label!r}")
        self.low, self.high, self.label = low, high, label
        self.num_models = high - low + 1

    def identifier(self, index: int) -> str:
        """``"<label>=<count>"`` of model ``index``."""
        return f"{self.label}={self.low + int(index)}"

    def index(self, identifier: str) -> int:
        """Index of ``"<label>=<count>"``."""
        label, _, count = identifier.partition("=")
        if label != self.label or not count.isdigit() or not self.low <= int(count) <= self.high:
            raise KeyError(f"expected {self.label}=<count> with {self.low} <= count <= {self.high}; got {identifier!r}")
        return int(count) - self.low

    def count(self, model_index: Tensor) -> Tensor:
        """The count of each model (int64)."""
        return model_index + self.low

    def sample_uniform(self, num: int, generator: torch.Generator) -> Tensor:
        """Uniform draws over the counts."""
        return torch.randint(0, self.num_models, (num,), generator=generator, device=generator.device)

    def propose_jump(self, model_index: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Up or down by one (1/2 each), from an end to its neighbour; the log ratio of reverse to forward."""
        last = self.num_models - 1
        zeros = torch.zeros(model_index.shape, device=model_index.device)
        if last == 0:
            return model_index.clone(), zeros
        up = torch.rand(model_index.shape, generator=generator, device=model_index.device) < 0.5
        proposed = torch.where(
            model_index == 0, 1, torch.where(model_index == last, last - 1, model_index + 2 * up - 1)
        )
        if last == 1:
            return proposed, zeros
        log_half = -torch.log(torch.tensor(2.0, device=model_index.device))
        at_end = (model_index == 0) | (model_index == last)
        lands_at_end = (proposed == 0) | (proposed == last)
        # log j(m | m') - log j(m' | m): -log 2 for a move from the interior, 0 from an end.
        reverse = torch.where(lands_at_end, zeros, zeros + log_half)
        forward = torch.where(at_end, zeros, zeros + log_half)
        return proposed, reverse - forward


def model_keys(model_index: Tensor) -> list[Any]:
    """Hashable Python keys of a batch of model indices: ints for ``[B]``, tuples of ints for ``[B, W]``."""
    values = model_index.detach().cpu().tolist()
    return values if model_index.ndim == 1 else [tuple(v) for v in values]
