"""Contracts every layer builds on.

Types, model spaces, problems, methods, the run context and its loop, checkpoints, the registry (plug-ins
included), backends, devices and atomic files. Nothing here imports another layer of the suite but
:mod:`suite.origin`; the old paths of modules that moved out (data, stored references, origin checks, guards)
forward with a DeprecationWarning (:mod:`suite.core.moved`).
"""
