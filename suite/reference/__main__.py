"""Run the reference engine's command line."""

import sys

import problems  # noqa: F401  (registers the built-in problems)
from suite.cli.reference_command import main

sys.exit(main())
