"""DAGs as (P, U): a Lehmer-coded topological order plus strictly upper-triangular edge bits (VTI App. F.6-F.7).

A model is the pair (sigma, U): ``sigma[a]`` is the topological position of
node a, and ``U`` is a strictly upper-triangular 0/1 matrix over positions, so
the adjacency is ``A[a, b] = U[sigma(a), sigma(b)]`` (``A = P^T U P``). The
permutation is written as d - 1 Lehmer digits: digit i (0-based, d - i
outcomes) picks the (digit + 1)-th still-unused position, in ascending order,
for node i; node d - 1 takes the last one. The edge bits follow
``torch.triu_indices`` order ((0,1), (0,2), ..., (1,2), ...).

There are d! 2^(d(d-1)/2) such models (1.3e20 for d = 10), beyond one int64,
so a model index is two int64 words: ``[rank, edge_bits]`` with ``rank`` the
mixed-radix value of the digits (digit 0 least significant) and ``edge_bits``
bit k = the k-th upper-triangular slot. Several (P, U) give the same DAG when
it has several topological orders; :meth:`PermutationDAGSpace.from_adjacency`
picks the smallest-label-first order.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from suite.core.model_space import ModelSpace

#: 11 nodes need 55 edge bits; 12 would need 66, more than one int64 word holds.
MAX_NODES = 11


class PermutationDAGSpace(ModelSpace):
    """Every (topological order, upper-triangular edge set) pair on d <= 11 nodes, as two-word indices.

    It is also a space of discrete variables for autoregressive model samplers (MADE+): ``cardinalities`` lists
    the d - 1 Lehmer digits (d, d - 1, ..., 2 outcomes) then the d(d-1)/2 edge bits (2 outcomes each);
    :meth:`to_variables` and :meth:`from_variables` convert between indices and those values.
    """

    index_width = 2
    num_models = None

    def __init__(self, num_nodes: int) -> None:
        if not 2 <= num_nodes <= MAX_NODES:
            raise ValueError(f"num_nodes must lie in [2, {MAX_NODES}] (edge bits in one int64 word), got {num_nodes}")
        d = num_nodes
        self.num_nodes = d
        self.radices = [d - i for i in range(d - 1)]
        self.num_edge_bits = d * (d - 1) // 2
        self.cardinalities = self.radices + [2] * self.num_edge_bits
        #: The exact number of (P, U) pairs (a Python int; not enumerable).
        self.size = math.factorial(d) * 2**self.num_edge_bits
        self._triu = torch.triu_indices(d, d, 1)

    # ---------------------------------------------------------------- words <-> parts
    def digits(self, model_index: Tensor) -> Tensor:
        """Lehmer digits ``[B, d - 1]`` (int64) of each index."""
        rank = model_index[:, 0]
        out = []
        for radix in self.radices:
            out.append(rank % radix)
            rank = rank // radix
        return torch.stack(out, -1) if out else rank[:, None][:, :0]

    def rank_of(self, digits: Tensor) -> Tensor:
        """Mixed-radix value ``[B]`` of Lehmer digits ``[B, d - 1]`` (digit 0 least significant)."""
        rank = torch.zeros(digits.shape[0], dtype=torch.int64, device=digits.device)
        for i in reversed(range(len(self.radices))):
            rank = rank * self.radices[i] + digits[:, i]
        return rank

    def edge_bits(self, model_index: Tensor) -> Tensor:
        """Upper-triangular edge bits ``[B, d(d-1)/2]`` (bool), slot k = bit k of word 1."""
        shifts = torch.arange(self.num_edge_bits, device=model_index.device)
        return (model_index[:, 1:2] >> shifts) & 1 == 1

    def positions(self, model_index: Tensor) -> Tensor:
        """``sigma`` ``[B, d]`` (int64): the topological position of every node (Lehmer decoding, App. F.6)."""
        digits = self.digits(model_index)
        b, d = model_index.shape[0], self.num_nodes
        unused = torch.ones(b, d, dtype=torch.bool, device=model_index.device)
        sigma = torch.empty(b, d, dtype=torch.int64, device=model_index.device)
        for node in range(d - 1):
            # The (digit + 1)-th unused position: the first whose running count of unused positions reaches it.
            count = torch.cumsum(unused.to(torch.int64), -1)
            hit = unused & (count == digits[:, node : node + 1] + 1)
            pos = hit.to(torch.int64).argmax(-1)
            sigma[:, node] = pos
            unused[torch.arange(b, device=unused.device), pos] = False
        sigma[:, d - 1] = unused.to(torch.int64).argmax(-1)
        return sigma

    def upper(self, model_index: Tensor) -> Tensor:
        """U ``[B, d, d]`` (bool, strictly upper triangular over topological positions)."""
        d = self.num_nodes
        out = torch.zeros(model_index.shape[0], d, d, dtype=torch.bool, device=model_index.device)
        rows, cols = self._triu.to(model_index.device)
        out[:, rows, cols] = self.edge_bits(model_index)
        return out

    def adjacency(self, model_index: Tensor) -> Tensor:
        """A ``[B, d, d]`` (bool): ``A[a, b] = U[sigma(a), sigma(b)]``, edge a -> b."""
        upper, sigma = self.upper(model_index), self.positions(model_index)
        d = self.num_nodes
        rows = torch.gather(upper, 1, sigma[:, :, None].expand(-1, d, d))
        return torch.gather(rows, 2, sigma[:, None, :].expand(-1, d, d))

    def encode(self, sigma: Tensor, upper: Tensor) -> Tensor:
        """The index ``[B, 2]`` of positions ``sigma`` ``[B, d]`` and upper-triangular edges ``upper`` ``[B, d, d]``."""
        d = self.num_nodes
        earlier = torch.tril(torch.ones(d, d, dtype=torch.bool, device=sigma.device), -1)  # [i, k]: k < i
        smaller_before = ((sigma[:, None, :] < sigma[:, :, None]) & earlier).sum(-1)  # [B, i]
        digits = (sigma - smaller_before)[:, : d - 1]
        rows, cols = self._triu.to(sigma.device)
        bits = upper[:, rows, cols].to(torch.int64)
        word = (bits << torch.arange(self.num_edge_bits, device=sigma.device)).sum(-1)
        return torch.stack([self.rank_of(digits), word], -1)

    def from_adjacency(self, adjacency: Tensor) -> Tensor:
        """One index ``[B, 2]`` per DAG ``[B, d, d]`` (smallest-label-first topological order).

        Raises ValueError naming the rows that have a directed cycle or a self-loop.
        """
        d = self.num_nodes
        if adjacency.ndim != 3 or tuple(adjacency.shape[1:]) != (d, d):
            raise ValueError(f"adjacency must have shape [B, {d}, {d}], got {tuple(adjacency.shape)}")
        a = adjacency.to(torch.bool)
        b = a.shape[0]
        placed = torch.zeros(b, d, dtype=torch.bool, device=a.device)
        sigma = torch.zeros(b, d, dtype=torch.int64, device=a.device)
        ok = ~a.diagonal(dim1=1, dim2=2).any(-1)
        for pos in range(d):
            # A node is ready when all its parents are placed; take the smallest ready label (Kahn's algorithm).
            waiting = (a & ~placed[:, :, None]).any(1)
            ready = ~placed & ~waiting
            ok &= ready.any(-1)
            node = ready.to(torch.int64).argmax(-1)
            sigma[torch.arange(b, device=a.device), node] = pos
            placed[torch.arange(b, device=a.device), node] = True
        if not bool(ok.all()):
            rows = (~ok).nonzero().flatten().tolist()
            shown = ", ".join(map(str, rows[:20])) + (f", ... ({len(rows)} in all)" if len(rows) > 20 else "")
            raise ValueError(f"rows {shown} are not DAGs on {d} nodes (a directed cycle or a self-loop)")
        # U[sigma(a), sigma(b)] = A[a, b]: scatter rows and columns back to positions.
        order = torch.argsort(sigma, -1)  # order[:, p] = node at position p
        rows = torch.gather(a, 1, order[:, :, None].expand(-1, d, d))
        upper = torch.gather(rows, 2, order[:, None, :].expand(-1, d, d))
        return self.encode(sigma, upper)

    # ------------------------------------------------------- discrete-variable view (MADE+)
    def to_variables(self, model_index: Tensor) -> Tensor:
        """Values ``[B, V]`` (int64) of the Lehmer digits then the edge bits."""
        return torch.cat([self.digits(model_index), self.edge_bits(model_index).to(torch.int64)], -1)

    def from_variables(self, values: Tensor) -> Tensor:
        """Indices ``[B, 2]`` from variable values ``[B, V]`` (inverse of :meth:`to_variables`)."""
        nd = len(self.radices)
        bits = values[:, nd:].to(torch.int64)
        word = (bits << torch.arange(self.num_edge_bits, device=values.device)).sum(-1)
        return torch.stack([self.rank_of(values[:, :nd].to(torch.int64)), word], -1)

    # ------------------------------------------------------------------ ModelSpace
    def identifier(self, index: tuple[int, int] | list[int]) -> str:
        """``"pos=<sigma of nodes 0..d-1>;U=<edge bits, slot 0 first>"``."""
        model = torch.tensor([list(index)], dtype=torch.int64)
        sigma = ",".join(str(p) for p in self.positions(model)[0].tolist())
        bits = "".join("1" if x else "0" for x in self.edge_bits(model)[0].tolist())
        return f"pos={sigma};U={bits}"

    def index(self, identifier: str) -> tuple[int, int]:
        """The two words of an identifier written by :meth:`identifier`."""
        d = self.num_nodes
        try:
            pos_part, u_part = identifier.split(";")
            sigma = [int(p) for p in pos_part.removeprefix("pos=").split(",")]
            bits = u_part.removeprefix("U=")
            if sorted(sigma) != list(range(d)) or len(bits) != self.num_edge_bits or set(bits) - {"0", "1"}:
                raise ValueError
        except ValueError:
            raise KeyError(
                f"expected 'pos=<a permutation of 0..{d - 1}>;U=<{self.num_edge_bits} characters 0/1>', "
                f"got {identifier!r}"
            ) from None
        upper = torch.zeros(1, d, d, dtype=torch.bool)
        rows, cols = self._triu
        upper[0, rows, cols] = torch.tensor([c == "1" for c in bits])
        word0, word1 = self.encode(torch.tensor([sigma]), upper)[0].tolist()
        return word0, word1

    def sample_uniform(self, num: int, generator: torch.Generator) -> Tensor:
        """Uniform (P, U): a uniform rank in [0, d!) and uniform edge bits."""
        device = generator.device
        rank = torch.randint(0, math.factorial(self.num_nodes), (num,), generator=generator, device=device)
        word = torch.randint(0, 2**self.num_edge_bits, (num,), generator=generator, device=device)
        return torch.stack([rank, word], -1)

    def propose_jump(self, model_index: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Flip one uniform edge bit, or (half the time) move one uniform Lehmer digit to another value; symmetric."""
        device = model_index.device
        b = model_index.shape[0]
        values = self.to_variables(model_index)
        nd = len(self.radices)
        flip_bit = torch.rand(b, generator=generator, device=device) < 0.5
        which_bit = nd + torch.randint(0, self.num_edge_bits, (b,), generator=generator, device=device)
        which_digit = torch.randint(0, max(nd, 1), (b,), generator=generator, device=device)
        which = torch.where(flip_bit | (nd == 0), which_bit, which_digit)
        radix = torch.tensor(self.cardinalities, device=device)[which]
        shift = 1 + (torch.rand(b, generator=generator, device=device) * (radix - 1)).floor().to(torch.int64)
        rows = torch.arange(b, device=device)
        values[rows, which] = (values[rows, which] + shift) % radix
        return self.from_variables(values), torch.zeros(b, device=device)
