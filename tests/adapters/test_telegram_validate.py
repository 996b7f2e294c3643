"""``coven-codex validate`` on an ``[adapters.telegram]`` section: library, token, access lists, ``getMe``."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from telegram_fake import TEST_TOKEN, FakeTelegram

from coven_codex.settings import load_settings
from coven_codex.validate.adapter_probes import adapter_plan
from coven_codex.validate.framework import ProbeContext, Status, run_plan


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as state:
        yield state


async def _outcomes(tmp_path: Path, section: str) -> dict[str, tuple[Status, str]]:
    config = tmp_path / "coven.toml"
    config.write_text(f'journal = "j.jsonl"\n\n[adapters.telegram]\n{section}\n', encoding="utf-8")
    settings = load_settings(config)
    return {
        o.probe.code: (o.result.status, o.result.detail)
        for o in await run_plan(adapter_plan(settings), ProbeContext(settings))
    }


async def test_a_good_telegram_section_passes_and_getme_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake: FakeTelegram
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TEST_TOKEN)
    outcomes = await _outcomes(tmp_path, f'allow_users = ["5001"]\napi_url = "{fake.base}"')
    assert list(outcomes) == ["telegram_library", "telegram_tokens", "telegram_access", "telegram_reachable"]
    assert all(status is Status.PASS for status, _ in outcomes.values()), outcomes
    assert outcomes["telegram_reachable"][1] == "Telegram knows the bot as @coven_bot"
    assert TEST_TOKEN not in repr(outcomes)


async def test_a_refused_token_fails_and_an_unreachable_telegram_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake: FakeTelegram
) -> None:
    other = "7000000002:AAAnotherTokenOfTheRightShape_abcdefg"
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", other)
    status, detail = (await _outcomes(tmp_path, f'allow_users = ["5001"]\napi_url = "{fake.base}"'))[
        "telegram_reachable"
    ]
    assert status is Status.FAIL and "Telegram refused the bot token" in detail and other not in detail
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    status, detail = (await _outcomes(tmp_path, f'allow_users = ["5001"]\napi_url = "http://127.0.0.1:{port}"'))[
        "telegram_reachable"
    ]
    assert status is Status.WARN and "could not be reached" in detail and other not in detail


async def test_a_malformed_token_and_an_empty_allow_list_fail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "xoxb-not-telegram")
    outcomes = await _outcomes(tmp_path, "allow_channels = []")
    status, detail = outcomes["telegram_tokens"]
    assert status is Status.FAIL and "does not hold the Telegram bot token" in detail
    assert "xoxb-not-telegram" not in detail
    status, detail = outcomes["telegram_access"]
    assert status is Status.FAIL and "allows nobody" in detail and "allow_channels is empty" in detail
    assert "telegram_reachable" not in outcomes or outcomes["telegram_reachable"][0] is not Status.PASS
