"""``python -m edgenlp.cli``: the ``edgenlp`` command."""

import sys

from edgenlp.cli import main

sys.exit(main(prog_name="edgenlp"))
