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
