"""Benchmarks run with the allocator settings the command line uses (see suite.run.harness.tune_allocator)."""

from suite.core.device import tune_allocator

tune_allocator()
