"""Contracts every layer builds on.

Types, model spaces, problems, methods, the run context, checkpoints, the registry, backends, devices, atomic
files and data loading. Nothing here imports another layer of the suite.
"""
