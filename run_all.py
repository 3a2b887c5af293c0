#!/usr/bin/env python3
"""Run every registered method on every registered problem and print leaderboards.

Usage: ``python run_all.py [--problems ...] [--methods ...] [--profile quick|paper] ...``;
``python run_all.py --help`` lists the options.
"""

import sys

from suite.cli import main

if __name__ == "__main__":
    sys.exit(main())
