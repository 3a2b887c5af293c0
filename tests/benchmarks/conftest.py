"""Benchmarks run with the allocator settings the command line uses (see suite.harness.tune_allocator)."""

from suite.harness import tune_allocator

tune_allocator()
