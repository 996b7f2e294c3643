"""``python -m coven_codex.testing``: the same as ``coven-codex model-server``."""

import sys

from coven_codex.cli.main import main

sys.exit(main(["model-server", *sys.argv[1:]]))
