"""Imported once by the fork server that starts worker processes: what every worker needs, loaded before the fork.

:func:`suite.run.parallel.run_in_workers` starts its workers from a fork server on a CPU. The server imports this
module once per grid process, so each worker it forks starts in milliseconds with torch, the registry (built-in
problems and methods, plug-ins) and torch's optimiser machinery already loaded, instead of importing them itself
for seconds. Importing this module has exactly those effects; it defines nothing.
"""

from suite.core.registry import load_all
from suite.run import parallel  # noqa: F401  (the workers' entry points)
from suite.run.harness import warm_up_torch

load_all(report=False)  # the grid's own process has said which plug-ins did not load
warm_up_torch()
