"""End to end, the real Codex CLI (0.169.0's app-server, 0.47.0's exec) and the scripted model:
what the daemon adds for chat adapters (issue 11, item 2).

- ``reset``: the next thought starts a new thread, the model sees none of the old history, and
  a reset is acted on exactly once across ``kill -9``;
- token usage on ``turn_completed``;
- ``in_reply_to`` on every entry of a turn, also on the entries a restarted daemon writes for a
  turn its predecessor was killed in;
- images in: a real PNG reaches the model as an ``input_image``; a bad attachment is refused once.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentHarness, make_responder, replies, user_prompts
from test_adapter_additions import png_bytes

from coven_codex.entries import Attachment, BaseEntry, ErrorEntry, ResetEntry, StatusEntry, ThoughtEntry
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.steps import Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def states(entries: list[BaseEntry], state: str, conversation: str = "c") -> list[StatusEntry]:
    return [e for e in entries if isinstance(e, StatusEntry) and e.state == state and e.conversation == conversation]


def requests_with(server: ScriptedModelServer, prompt: str) -> list[RecordedRequest]:
    return [r for r in server.requests.responses_requests() if user_prompts(r) and user_prompts(r)[-1] == prompt]


# -- reset ---------------------------------------------------------------------------------------------
async def test_reset_starts_a_new_thread_without_the_old_history(
    codex_bin: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin, model_server)
    daemon = await h.start()
    await h.think("c", "before the reset")
    await h.wait_for(lambda es: "echo: before the reset" in replies(es), what="the first reply")
    await h.append(ResetEntry(conversation="c"))
    await h.wait_for(lambda es: bool(states(es, "session_reset")), what="the reset")
    await h.think("c", "after the reset")
    entries = await h.wait_for(lambda es: "echo: after the reset" in replies(es), what="the second reply")
    assert await h.stop(daemon) == 0
    (reset,) = states(entries, "session_reset")
    threads = [getattr(e, "thread_id", None) for e in entries if e.kind == "response"]
    assert len(set(threads)) == 2 and reset.thread_id == threads[0] and threads[0] in reset.text
    (request,) = requests_with(model_server, "after the reset")
    assert user_prompts(request) == ["after the reset"]  # the model sees none of the old thread


async def test_a_reset_is_acted_on_once_across_kill9(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    await h.think("c", "before the reset")
    await h.wait_for(lambda es: "echo: before the reset" in replies(es), what="the first reply")
    await h.kill9(daemon)
    await h.append(ResetEntry(conversation="c"))  # read by the next daemon
    daemon = await h.start()
    await h.wait_for(lambda es: bool(states(es, "session_reset")), what="the reset")
    await h.kill9(daemon)  # between the reset and the next thought (its state saved or not)
    daemon = await h.start()
    await h.until_logged("ready (pid")
    await h.think("c", "after the reset")
    entries = await h.wait_for(lambda es: "echo: after the reset" in replies(es), what="the second reply")
    assert await h.stop(daemon) == 0
    assert len(states(entries, "session_reset")) == 1
    assert len(states(entries, "session_started")) == 2  # the first thread, then the new one
    (request,) = requests_with(model_server, "after the reset")
    assert user_prompts(request) == ["after the reset"]
    assert len(requests_with(model_server, "before the reset")) == 1


# -- token usage ---------------------------------------------------------------------------------------
async def test_turn_completed_carries_token_usage(
    codex_bin: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin, model_server)
    daemon = await h.start()
    await h.think("c", "count my tokens")
    entries = await h.wait_for(lambda es: bool(states(es, "turn_completed")), what="the turn's end")
    assert await h.stop(daemon) == 0
    (end,) = states(entries, "turn_completed")
    assert end.usage is not None, end
    assert end.usage.input_tokens and end.usage.output_tokens
    assert end.usage.total_tokens == end.usage.input_tokens + end.usage.output_tokens
    assert end.usage.cached_input_tokens == 0


# -- in_reply_to ---------------------------------------------------------------------------------------
def _rollout_has(codex_home: Path, *needles: bytes) -> bool:
    for path in (codex_home / "sessions").rglob("rollout-*.jsonl"):
        data = path.read_bytes()
        if all(needle in data for needle in needles):
            return True
    return False


async def test_entries_of_a_turn_carry_its_thought_across_a_kill9_mid_turn(
    codex_bin: Path, harness_factory: Factory
) -> None:
    responder = make_responder({"slow": lambda r: (Stall(2.0), Reply("slow done"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin, server)
        daemon = await h.start()
        first = await h.think("c", "a quick one")
        await h.wait_for(lambda es: len(states(es, "turn_completed")) == 1, what="the first turn")
        slow = await h.think("c", "slow one")
        await h.wait_for(lambda es: len(states(es, "turn_started")) == 2, what="the slow turn's start")
        # The daemon stops mid-turn; Codex finishes the turn into its rollout meanwhile; then the
        # daemon is killed, and the next one translates the rest of the turn.
        os.kill(daemon.pid, signal.SIGSTOP)
        done = (b"slow done", b"task_complete") if "0.169" in str(codex_bin) else (b"slow done",)
        deadline = time.monotonic() + 60
        while not _rollout_has(h.codex_home, *done):
            assert time.monotonic() < deadline, "Codex did not finish the turn"
            await asyncio.sleep(0.1)
        before = {e.id for e in await h.entries()}
        await h.kill9(daemon)
        daemon = await h.start()
        entries = await h.wait_for(lambda es: "slow done" in replies(es), what="the slow reply after the restart")
        assert await h.stop(daemon) == 0
    after = [e for e in entries if e.id not in before and e.sender == "codex"]
    assert any(e.kind == "response" for e in after)
    of_turns = [e for e in entries if e.kind in ("response", "tool_call", "tool_result", "reasoning", "delta")]
    of_turns += [e for e in entries if isinstance(e, StatusEntry) and e.state.startswith("turn_")]
    expected = {"a quick one": first.entry.id, "slow one": slow.entry.id}

    def answered(entry: BaseEntry) -> Any:
        return getattr(entry, "in_reply_to", None)

    assert all(answered(e) in expected.values() for e in of_turns), [(e.kind, answered(e)) for e in of_turns]
    assert [answered(e) for e in entries if e.kind == "response"] == [first.entry.id, slow.entry.id]
    for entry in after:
        if entry.kind == "response" or (isinstance(entry, StatusEntry) and entry.state.startswith("turn_")):
            assert answered(entry) == slow.entry.id, entry


# -- images --------------------------------------------------------------------------------------------
def _images(request: RecordedRequest) -> list[str]:
    urls: list[str] = []
    for item in request.input_items():
        content = item.get("content")
        if item.get("role") == "user" and isinstance(content, list):
            urls += [str(part.get("image_url", "")) for part in content if part.get("type") == "input_image"]
    return urls


async def test_an_attached_png_reaches_the_model_and_a_bad_attachment_is_refused(
    codex_bin: Path, codex_version: str, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin, model_server)
    folder = h.journal_path.parent / f"{h.journal_path.name}.attachments"
    folder.mkdir()
    picture = folder / "pixel.png"
    picture.write_bytes(png_bytes())
    (folder / "script.png").write_bytes(b"#!/bin/sh\necho not an image\n")
    daemon = await h.start()
    await h.think("c", "plain first")  # the image then goes with a resumed thread (exec: `--image` before `resume`)
    await h.wait_for(lambda es: "echo: plain first" in replies(es), what="the first reply")
    bad = await h.append(
        ThoughtEntry(
            conversation="c", text="bad picture", attachments=[Attachment(url=(folder / "script.png").as_uri())]
        )
    )
    good = await h.append(
        ThoughtEntry(
            conversation="c",
            text="what is in this picture",
            attachments=[Attachment(url=picture.as_uri(), media_type="image/png", name="pixel.png")],
        )
    )
    if codex_version == "0.47.0":
        # exec cannot take images: 0.47's `exec --image … resume <thread> -` sent the image without
        # the thought's text, so the exec driver refuses a thought with images, once, saying why
        entries = await h.wait_for(
            lambda es: len([e for e in es if isinstance(e, ErrorEntry)]) == 2, what="the two refusals"
        )
        assert await h.stop(daemon) == 0
        refused = {e.in_reply_to: e for e in entries if isinstance(e, ErrorEntry)}
        assert set(refused) == {bad.entry.id, good.entry.id}
        assert all(e.code == "REFUSED" for e in refused.values())
        assert "app-server driver" in refused[good.entry.id].text
        assert not requests_with(model_server, "bad picture")
        assert not requests_with(model_server, "what is in this picture")
        return
    # (0.169 wraps the image in text tags naming its file; the echo repeats them before the thought's text)
    entries = await h.wait_for(
        lambda es: any(r.endswith("what is in this picture") for r in replies(es)), what="the image reply"
    )
    assert await h.stop(daemon) == 0
    (request,) = [
        r
        for r in model_server.requests.responses_requests()
        if user_prompts(r) and user_prompts(r)[-1].endswith("what is in this picture")
    ]
    expected = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    assert _images(request) == [expected]
    assert not requests_with(model_server, "bad picture")
    refused = [e for e in entries if isinstance(e, ErrorEntry)]
    assert len(refused) == 1 and refused[0].code == "REFUSED" and refused[0].in_reply_to == bad.entry.id
    assert "not a PNG, JPEG, GIF or WebP image" in refused[0].text
    assert good.entry.id in {getattr(e, "in_reply_to", None) for e in entries if e.kind == "response"}
