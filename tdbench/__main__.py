"""``python -m tdbench ARGS``: the ``tdbench`` command, for an environment whose scripts folder is not on PATH."""

import sys

from suite.cli import main

sys.exit(main(sys.argv[1:], prog="python -m tdbench"))
