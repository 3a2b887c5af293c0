"""tdbench's Python API for results: ``tdbench.results.load(DIR)``, ``tdbench.results.draws(run)``.

The benchmark itself (problems, methods, the runner) lives in the ``suite``, ``problems`` and ``methods``
packages; reading results needs none of them.
"""
