"""``python -m coven_codex`` is ``coven-codex``."""

import sys

from coven_codex.cli.main import main

sys.exit(main())
