"""The documentation stays true: every setting is documented, every documented key exists."""

from __future__ import annotations

import re
from pathlib import Path

from coven_codex.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_in_the_configuration_reference() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    table = doc[doc.index("## Every setting"):doc.index("A `coven.toml`")]
    documented = set(re.findall(r"^\| `\[?([a-z_]+)\]?` \|", table, re.M))
    assert documented == set(Settings.model_fields)


def test_the_example_coven_toml_is_valid() -> None:
    import tomllib

    doc = (ROOT / "docs" / "configuration.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    Settings.model_validate(tomllib.loads(example))


def test_the_thought_limits_table_matches_the_code() -> None:
    from coven_codex.agent.limits import MAX_CONVERSATION_CHARS, MAX_ID_CHARS, MAX_THOUGHT_CHARS

    doc = (ROOT / "docs" / "journal-protocol.md").read_text()
    table = doc[doc.index("## Limits"):doc.index("## Positions")]
    documented = {name: int(limit) for name, limit in re.findall(r"^\| `([a-z_]+)` \| (\d+) \|", table, re.M)}
    assert documented == {"conversation": MAX_CONVERSATION_CHARS, "id": MAX_ID_CHARS, "text": MAX_THOUGHT_CHARS}
