"""The chat adapter commands (``coven-codex slack|discord|telegram``) share their options and their
run: one ``--config``/``--journal``, one refusal line, one exit code per way the adapter ends."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from types import ModuleType

import pytest

from coven_codex.adapters.kit.platform import PlatformError
from coven_codex.cli import discord, slack, telegram
from coven_codex.cli.options import adapter_refused, run_adapter


@pytest.mark.parametrize("command", [slack, discord, telegram], ids=lambda command: command.__name__.rsplit(".")[-1])
def test_every_adapter_command_takes_its_section_file_and_a_journal(command: ModuleType, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args(["--config", str(tmp_path / "coven.toml"), "--journal", str(tmp_path / "j.jsonl")])
    assert (args.config, args.journal) == (tmp_path / "coven.toml", tmp_path / "j.jsonl")
    name = command.__name__.rsplit(".")[-1]
    assert f"[adapters.{name}]" in parser.format_help()


def test_a_platform_refusal_ends_the_adapter_with_its_message_and_exit_code_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def refused() -> None:
        raise PlatformError("the bot token was revoked; make a new one")

    assert run_adapter("slack", refused) == 1
    assert capsys.readouterr().err == "coven-codex slack: the bot token was revoked; make a new one\n"


def test_an_adapter_cancelled_by_a_signal_exits_0_and_one_that_ends_exits_0() -> None:
    async def cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)

    async def ends() -> None:
        return None

    assert run_adapter("discord", cancelled) == 0
    assert run_adapter("discord", ends) == 0


def test_a_refusal_to_start_is_one_line_and_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert adapter_refused("telegram", "no journal: set journal = ...") == 2
    assert capsys.readouterr().err == "coven-codex telegram: no journal: set journal = ...\n"
