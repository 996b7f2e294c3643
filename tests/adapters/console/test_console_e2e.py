"""End to end: the daemon with the real Codex CLI 0.169.0 and the scripted model, behind the console
chat (``coven-codex chat`` as a process: its stdin is the keyboard, what it prints the platform). A
turn of thirty spell calls prints at most three messages in ``quiet`` mode, counted as docs/adapters.md
("The console") defines a console message; an image Codex generates is printed as a file Codex sent,
with no console code of its own for it."""

from __future__ import annotations

import asyncio
import base64
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness

from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.steps import CallTool, OutputItem, Reply, TurnScript

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]
THIRTY = 30
MESSAGE_HEAD = re.compile(
    r"^(codex:|\S+>|\[|  \[|→ |← |✗ |error [A-Z_]+:|approval needed|codex sent a file:"
    r"|working · |done in |failed |cancelled )"
)
"""The first line of a console message (docs/adapters.md, "The console"); a card's step lines follow its header."""
CARD_HEAD = re.compile(r"^(working · |done in |failed |cancelled )")
CARD_LINE = re.compile(r"^(… \d+ earlier steps|[…✓✗] \S)")


def console_messages(printed: str) -> list[str]:
    """``printed`` cut into the console's messages: each starts with a :data:`MESSAGE_HEAD` line; the
    lines after a card's header are its steps. A line that is neither fails (nothing is counted loosely)."""
    messages: list[list[str]] = []
    for line in printed.splitlines():
        if messages and CARD_HEAD.match(messages[-1][0]) and CARD_LINE.match(line):
            messages[-1].append(line)
        elif MESSAGE_HEAD.match(line):
            messages.append([line])
        else:
            raise AssertionError(f"a line that starts no message and continues none: {line!r} in {printed!r}")
    return ["\n".join(lines) for lines in messages]


async def start_chat(journal: Path, conversation: str, *args: str) -> asyncio.subprocess.Process:
    """``coven-codex chat`` as a process: stdin piped (not a terminal: no prompt), its output piped."""
    return await asyncio.create_subprocess_exec(
        str(ROOT / ".venv" / "bin" / "coven-codex"),
        "chat",
        "--journal",
        str(journal),
        "--conversation",
        conversation,
        "--sender",
        "ann",
        "--no-colour",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def read_until(chat: asyncio.subprocess.Process, printed: bytes, *texts: str) -> bytes:
    """What ``chat`` printed (bytes: a read may end inside a character), read on until every one of
    ``texts`` is in it."""
    assert chat.stdout is not None
    while not all(text.encode() in printed for text in texts):
        chunk = await chat.stdout.read(4096)
        assert chunk, f"the console ended before it printed {texts}: {printed!r}"
        printed += chunk
    return printed


def respond_thirty(request: RecordedRequest) -> TurnScript:
    """30 spell calls in one turn, one after another, then a reply."""
    done = len(request.function_call_outputs())
    if done < THIRTY:
        return CallTool("coven.add", {"a": done, "b": 1})
    return Reply("thirty additions done.")


async def test_a_turn_of_thirty_spell_calls_posts_at_most_three_messages_in_quiet_mode(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    async with ScriptedModelServer(responder=respond_thirty) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        daemon = await h.start("--spells", "coven_codex.demo.spells:spells")
        chat = await start_chat(h.journal_path, "sums", "--render", "quiet")
        assert chat.stdin is not None and chat.stdout is not None
        printed = b""
        try:
            async with asyncio.timeout(120):
                printed = await read_until(chat, printed, "/help for commands")
                start = len(printed)
                chat.stdin.write(b"thirty additions, please\n")
                await chat.stdin.drain()
                printed = await read_until(chat, printed, "codex: thirty additions done.\n", "a=29, b=1)\n")
            messages = console_messages(printed[start:].decode())
            assert 2 <= len(messages) <= 3, messages
            [card] = [m for m in messages if m.startswith("done in")]
            assert f"· {THIRTY} steps" in card.splitlines()[0] and "✓ coven.add(a=29, b=1)" in card
            assert "codex: thirty additions done." in messages
            assert "→ coven.add" not in printed.decode()  # (verbose would print every call and result)
        finally:
            chat.stdin.close()
            async with asyncio.timeout(20):
                await chat.wait()
            assert await h.stop(daemon) == 0


PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


async def test_an_image_codex_generates_is_printed_as_a_file_codex_sent(
    codex_bin_169: Path, harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness]
) -> None:
    image = {
        "type": "image_generation_call",
        "id": "ig_console1",
        "status": "completed",
        "revised_prompt": "a red pixel",
        "result": base64.b64encode(PIXEL).decode(),
    }
    async with ScriptedModelServer(script=[(OutputItem(image), Reply("drawn."))]) as server:
        h = harness_factory(codex_bin_169, server)
        daemon = await h.start()
        chat = await start_chat(h.journal_path, "pictures")
        assert chat.stdin is not None
        try:
            async with asyncio.timeout(120):
                printed = await read_until(chat, b"", "/help for commands")
                chat.stdin.write(b"draw a red pixel\n")
                await chat.stdin.drain()
                printed = await read_until(chat, printed, "codex: drawn.\n", "bytes): a red pixel\n")
            [line] = [line for line in printed.decode().splitlines() if line.startswith("codex sent a file:")]
            path = Path(line.removeprefix("codex sent a file: ").split(" (", 1)[0])
            assert path.read_bytes() == PIXEL and path.parent.name == "out"
            assert line.endswith(f"(ig_console1.png, {len(PIXEL)} bytes): a red pixel")
            assert "[image] generated an image: a red pixel\n" in printed.decode()  # its activity (verbose: a line)
        finally:
            chat.stdin.close()
            async with asyncio.timeout(20):
                await chat.wait()
            assert await h.stop(daemon) == 0
