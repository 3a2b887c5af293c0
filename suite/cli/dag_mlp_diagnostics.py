"""``python -m suite.cli.dag_mlp_diagnostics``: the two dag-mlp diagnostics of docs/limitations.md.

``edge-evidence`` prints the Laplace evidence of the true graph and of the graphs one true edge short
(:mod:`suite.studies.dag_mlp_edge_evidence`); ``fixed-graph-flow`` trains vti-mcg's flow with q held at the true
graph and prints its loss (:mod:`suite.studies.dag_mlp_fixed_graph_flow`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from suite.studies.dag_mlp_edge_evidence import run_edge_evidence
from suite.studies.dag_mlp_fixed_graph_flow import run_fixed_graph_flow


def build_parser() -> argparse.ArgumentParser:
    """The two diagnostics as subcommands."""
    parser = argparse.ArgumentParser(
        prog="python -m suite.cli.dag_mlp_diagnostics", description="The dag-mlp diagnostics of docs/limitations.md."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    evidence = commands.add_parser(
        "edge-evidence", help="Laplace evidence of the true graph and its one-edge-short neighbours"
    )
    evidence.add_argument("--data-seed", type=int, default=0)
    evidence.add_argument("--random-starts", type=int, default=3, help="random L-BFGS starts for the true graph")
    flow = commands.add_parser("fixed-graph-flow", help="vti-mcg's flow trained with q held at the true graph")
    flow.add_argument("--data-seed", type=int, default=0)
    flow.add_argument("--iterations", type=int, default=500)
    flow.add_argument("--flow", default="affine(3,3)")
    flow.add_argument("--flow-lr", type=float, default=1e-2)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen diagnostic; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "edge-evidence":
        run_edge_evidence(args.data_seed, args.random_starts)
    else:
        run_fixed_graph_flow(args.data_seed, args.iterations, args.flow, args.flow_lr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
