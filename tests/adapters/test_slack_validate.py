"""``coven-codex validate`` on an ``[adapters.slack]`` section checks the bot token's scopes
(``auth.test``'s ``x-oauth-scopes``), and the adapter says at start which are missing and what for:
without ``channels:history``/``groups:history`` follow-ups in threads never arrive."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from slack_fake import APP_TOKEN, BOT_TOKEN, FakeSlack
from slack_under_test import SlackAdapter

from coven_codex.adapters.slack.platform import REQUIRED_SCOPES
from coven_codex.settings import load_settings
from coven_codex.validate.adapter_probes import adapter_plan
from coven_codex.validate.framework import ProbeContext, Status, run_plan

WITHOUT_HISTORY = tuple(s for s in REQUIRED_SCOPES if s not in ("channels:history", "groups:history"))


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    state = FakeSlack()
    await state.start()
    try:
        yield state
    finally:
        await state.stop()


async def _scopes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api_url: str) -> tuple[Status, str]:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    config = tmp_path / "coven.toml"
    config.write_text(
        f'journal = "j.jsonl"\n\n[adapters.slack]\nallow_users = ["UANN"]\napi_url = "{api_url}"\n', encoding="utf-8"
    )
    settings = load_settings(config)
    outcomes = {o.probe.code: o for o in await run_plan(adapter_plan(settings), ProbeContext(settings))}
    found = outcomes["slack_scopes"].result
    assert BOT_TOKEN not in repr(found)
    return found.status, found.detail + " " + found.fix


async def test_validate_passes_a_token_with_the_manifest_s_scopes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeSlack
) -> None:
    status, detail = await _scopes(tmp_path, monkeypatch, f"{fake.url}/api/")
    assert status is Status.PASS and "every scope" in detail, detail


async def test_validate_fails_a_token_without_the_history_scopes_and_says_what_stops_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeSlack
) -> None:
    fake.scopes = WITHOUT_HISTORY
    status, detail = await _scopes(tmp_path, monkeypatch, f"{fake.url}/api/")
    assert status is Status.FAIL, detail
    assert "channels:history (the message.channels event" in detail and "groups:history" in detail
    assert "reinstall" in detail


async def test_validate_warns_when_slack_cannot_be_reached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    status, detail = await _scopes(tmp_path, monkeypatch, f"http://127.0.0.1:{port}/api/")
    assert status is Status.WARN and "could not be reached" in detail


async def test_the_adapter_says_at_start_which_scopes_the_token_lacks(tmp_path: Path) -> None:
    adapter = SlackAdapter(tmp_path)
    adapter.fake.scopes = WITHOUT_HISTORY
    try:
        await adapter.start()
    finally:
        await adapter.close()
    log = adapter.stderr.read_text()
    assert "the bot token lacks channels:history" in log and "groups:history" in log
