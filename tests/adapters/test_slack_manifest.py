"""The Slack app manifest in the repository asks for what the adapter uses, no more and no less."""

from __future__ import annotations

import json
from pathlib import Path

from coven_codex.adapters.slack.platform import BOT_EVENTS, REQUIRED_SCOPES, SLASH_COMMAND

ROOT = Path(__file__).resolve().parents[2]


def test_the_manifest_matches_the_adapter() -> None:
    manifest = json.loads((ROOT / "examples" / "slack-manifest.json").read_text())
    assert sorted(manifest["oauth_config"]["scopes"]["bot"]) == sorted(REQUIRED_SCOPES)
    assert tuple(manifest["settings"]["event_subscriptions"]["bot_events"]) == BOT_EVENTS
    assert [c["command"] for c in manifest["features"]["slash_commands"]] == [SLASH_COMMAND]
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert manifest["settings"]["interactivity"]["is_enabled"] is True


def test_the_docs_list_every_scope() -> None:
    doc = (ROOT / "docs" / "adapters.md").read_text()
    section = doc[doc.index("## Slack") :]
    assert all(f"`{scope}`" in section for scope in REQUIRED_SCOPES)
