"""Train ``vti-mcg``'s flow with q held at the true dag-mlp graph and print its loss (docs/limitations.md).

Tells whether the flow can fit the dense true graph at all: its loss (minus the ELBO of that graph) is to be
compared with the graph's Laplace evidence (``dag_mlp_edge_evidence.py``) and with VTI's terminal losses.
It starts from the method's ``untrained`` flow and model sampler and trains them with the fixed model.

    python -m suite.studies.dag_mlp_fixed_graph_flow --data-seed 0 --iterations 500 --flow-lr 0.01
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from torch import Tensor

from methods.vti import Trainer
from suite.core.context import RunContext
from suite.core.registry import make_method, make_problem


class FixedModel:
    """A model sampler that always proposes one model and never learns (duck-types ``ModelSampler``)."""

    def __init__(self, model_index: Tensor) -> None:
        self.model_index = model_index

    def sample(self, num: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``num`` copies of the model, log q = 0."""
        return self.model_index.expand(num, -1), torch.zeros(num)

    def update(self, *args: object) -> None:
        """Nothing to learn."""


def main() -> None:
    """Train and print the mean loss of every 250 iterations' last 50."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--flow", default="affine(3,3)")
    parser.add_argument("--flow-lr", type=float, default=1e-2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    problem = make_problem("dag-mlp", data_seed=args.data_seed)
    method = make_method("vti-mcg", flow=args.flow, flow_lr=args.flow_lr).resolve(problem, "quick")
    built = method.untrained(problem, RunContext(seed=0, dtype=torch.float32, profile="quick"))
    train_settings = dataclasses.replace(
        method.train_settings(), num_iterations=args.iterations, grad_clip=50.0, warmup_iterations=0
    )
    trainer = Trainer(
        problem,
        built.flow,
        FixedModel(problem.true_model_index[None]),
        built.context_of,
        train_settings,
        built.generator,
    )
    for iteration in range(args.iterations):
        trainer.step(iteration)
        if (iteration + 1) % 250 == 0:
            recent = trainer.trace["loss"][-50:]
            print(f"iteration {iteration + 1}: loss {sum(recent) / len(recent):.1f}", flush=True)


if __name__ == "__main__":
    main()
