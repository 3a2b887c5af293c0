#!/usr/bin/env python3
"""``python run_all.py ARGS`` is ``tdbench run ARGS``: run methods on problems, write records and the report.

``python run_all.py --help`` lists the arguments; ``--report-only --out DIR`` rewrites a results folder's report.
"""

import sys

from suite.cli import run_all

if __name__ == "__main__":
    sys.exit(run_all())
