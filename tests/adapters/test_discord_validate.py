"""``coven-codex validate`` on an ``[adapters.discord]`` section: library, token, access lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from coven_codex.settings import load_settings
from coven_codex.validate.adapter_probes import adapter_plan
from coven_codex.validate.framework import ProbeContext, Status, run_plan

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.GabcDe.abcdefghijklmnopqrstuvwxyz012345"


async def _outcomes(tmp_path: Path, section: str) -> dict[str, tuple[Status, str]]:
    config = tmp_path / "coven.toml"
    config.write_text(f'journal = "j.jsonl"\n\n[adapters.discord]\n{section}\n', encoding="utf-8")
    settings = load_settings(config)
    return {
        o.probe.code: (o.result.status, o.result.detail)
        for o in await run_plan(adapter_plan(settings), ProbeContext(settings))
    }


async def test_a_good_discord_section_passes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", TOKEN)
    section = 'allow_users = ["1"]\nallow_groups = ["2"]\nallow_channels = ["3", "4"]\nthread_channels = ["3"]'
    outcomes = await _outcomes(tmp_path, section)
    assert list(outcomes) == ["discord_library", "discord_tokens", "discord_access"]
    assert all(status is Status.PASS for status, _ in outcomes.values()), outcomes
    assert outcomes["discord_tokens"][1] == "present and well-formed: token from $DISCORD_BOT_TOKEN"
    assert TOKEN not in repr(outcomes)
    assert outcomes["discord_access"][1] == "access: 1 user(s), 1 role(s) in 2 channel(s); 0 admin(s)"


async def test_a_malformed_token_and_unanswered_channels_fail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "xoxb-not-discord")
    section = 'allow_users = ["1"]\nallow_channels = ["3"]\nthread_channels = ["3", "9"]\nlisten_channels = ["8"]'
    outcomes = await _outcomes(tmp_path, section)
    status, detail = outcomes["discord_tokens"]
    assert status is Status.FAIL and "does not hold the Discord bot token (three dot-separated parts)" in detail
    assert "xoxb-not-discord" not in detail
    status, detail = outcomes["discord_access"]
    assert status is Status.FAIL
    assert "thread_channels names channels that allow_channels leaves out (9)" in detail
    assert "listen_channels names channels that allow_channels leaves out (8)" in detail
