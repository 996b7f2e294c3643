"""The state an older coven-codex left (``tests/fixtures/legacy_state/tree``, made by the code before
issue 35 with ``make_fixture.py`` there), put where a test's daemon looks for it."""

from __future__ import annotations

import shutil
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent / "fixtures" / "legacy_state" / "tree"
SECRET = "tangerine-42"
"""What journal A's conversation ``c`` was told (its first and only thought)."""
FIRST_THOUGHT = f"remember: the launch code is {SECRET}"


def install(root: Path, state_dir: Path, codex_home: Path) -> None:
    """Journal A at ``root/journal.jsonl`` (with its cursors), the old state in ``state_dir/sessions``
    and the Codex rollouts in ``codex_home/sessions``; the tree's ``@ROOT@`` becomes ``root``."""
    places = {"state": state_dir, "codex-home": codex_home}
    for source in sorted(TREE.rglob("*")):
        if not source.is_file():
            continue
        relative = source.relative_to(TREE)
        top = relative.parts[0]
        target = places[top].joinpath(*relative.parts[1:]) if top in places else root / relative
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = source.read_text(encoding="utf-8")
        text = text.replace("@ROOT@/codex-home", str(codex_home)).replace("@ROOT@", str(root))
        target.write_text(text, encoding="utf-8")
        shutil.copymode(source, target)
