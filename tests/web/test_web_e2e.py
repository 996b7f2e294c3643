"""End to end in real headless Chromium: the page server, the daemon, the real Codex CLI 0.169.0
and the scripted model server. Type a thought and see the streamed reply once; a spell call;
approve a command; cancel a slow turn; reload and a second tab show the same messages.

Set ``COVEN_WEB_SCREENSHOTS=docs/images`` to write the screenshots used in the docs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, user_prompts
from chat_script import chat_responder, last_prompt
from playwright.async_api import Page
from web_helpers import WebServer, chromium, message_ids, open_page

from coven_codex.entries import BaseEntry, CancelEntry
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.responders import pending_tool_output
from coven_codex.testing.steps import CallTool, Reply, Stall, TurnScript

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

STREAMED = "Here is a streamed answer with `code`:\n\n```python\nprint('hello from codex')\n```"
chat = chat_responder(STREAMED)


def respond(request: RecordedRequest) -> TurnScript:
    """The chat surfaces' script (tests/chat_script.py); a thought starting ``slow`` stalls its turn."""
    if last_prompt(request).startswith("slow") and pending_tool_output(request) is None:
        return (Stall(60.0), Reply("never"))
    return chat(request)


async def shot(page: Page, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("COVEN_WEB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(folder / f"{name}.png"))


async def count_text(page: Page, text: str) -> int:
    found: int = await page.evaluate("t => document.getElementById('messages').innerText.split(t).length - 1", text)
    return found


async def test_the_page_drives_codex_end_to_end(
    codex_bin_169: Path,
    harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness],
    tmp_path: Path,
    chromium_path: str,
) -> None:
    async with ScriptedModelServer(responder=respond) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        daemon = await h.start("--spells", "coven_codex.demo.spells:spells")
        web = WebServer(h.journal_path, tmp_path)
        url = await web.start()
        errors: list[str] = []
        try:
            async with chromium(tmp_path / "profile") as browser:
                page = await open_page(browser, url + "#c=web", errors)
                await page.evaluate("""() => { window.sawStream = false;
                    new MutationObserver(() => { if (document.querySelector('.msg.stream')) window.sawStream = true; })
                      .observe(document.getElementById('messages'), {childList: true, subtree: true}); }""")
                # a thought, its reply streamed in and then shown once, with its code block
                await page.fill("#input", "hello codex")
                await page.press("#input", "Enter")
                await page.wait_for_selector(".msg.response:not(.stream) pre code.language-python", timeout=60_000)
                assert await page.evaluate("window.sawStream"), "the reply was not streamed into the page"
                assert await page.locator(".msg.stream").count() == 0
                assert await count_text(page, "print('hello from codex')") == 1
                assert await count_text(page, "hello codex") == 1
                # a spell call and its result
                await page.fill("#input", "add 2 and 3")
                await page.press("#input", "Enter")
                await page.wait_for_selector(".msg.response:has-text('the spell says')", timeout=60_000)
                assert "add" in (await page.text_content(".msg.steps .msg.tool_call") or "")  # folded with the steps
                result = await page.locator(".msg.steps .msg.tool_result").last.text_content()
                assert (result or "").strip().endswith("5")
                # a command that needs approval: the button answers it
                await page.fill("#input", "run the touch command")
                await page.press("#input", "Enter")
                approve = page.locator(".msg.approval_request button.approve")
                await approve.wait_for(timeout=60_000)
                await shot(page, "web-approval", tmp_path)
                await approve.click()
                await page.wait_for_selector(".msg.response:has-text('the command ran')", timeout=60_000)
                assert (h.workspace / "approved.txt").exists()
                assert await page.locator(".msg.approval_request button:disabled").count() == 3
                # a slow turn, stopped with the Stop button
                asked = len(server.requests.responses_requests())
                await page.fill("#input", "slow work please")
                await page.press("#input", "Enter")
                await page.wait_for_selector("#stop:not([disabled])", timeout=60_000)
                async with asyncio.timeout(60):  # the model is working on it: the turn is really running
                    await server.requests.wait_for(asked + 1)
                await page.click("#stop")
                await page.wait_for_selector(".msg.status:has-text('turn aborted')", timeout=60_000)
                await page.wait_for_selector("#stop[disabled]")
                await shot(page, "web-chat", tmp_path)
                # a second tab and a reload show exactly the same messages
                ids = await message_ids(page)
                second = await open_page(browser, f"{web.base}/#c=web", errors)
                await second.wait_for_function(
                    "n => document.querySelectorAll('#messages .msg[id]').length >= n", arg=len(ids)
                )
                assert await message_ids(second) == ids
                await page.reload()
                await page.wait_for_function(
                    "n => document.querySelectorAll('#messages .msg[id]').length >= n", arg=len(ids)
                )
                assert await message_ids(page) == ids
                assert await count_text(page, "the spell says") == 1
                assert errors == []
            entries: list[BaseEntry] = await h.entries()
            cancels = [e for e in entries if isinstance(e, CancelEntry)]
            assert len(cancels) == 1 and cancels[0].conversation == "web" and cancels[0].sender == "tester"
            prompts = [
                user_prompts(r)[-1] for r in server.requests.responses_requests() if pending_tool_output(r) is None
            ]
            assert prompts == ["hello codex", "add 2 and 3", "run the touch command", "slow work please"]
            assert await web.stop() == 0
            assert await h.stop(daemon) == 0
        finally:
            if web.process is not None and web.process.returncode is None:
                await web.kill9()


def respond_thirty(request: RecordedRequest) -> TurnScript:
    """30 spell calls in one turn, one after another, then a reply."""
    done = len(request.function_call_outputs())
    return CallTool("coven.add", {"a": done, "b": 1}) if done < 30 else Reply("thirty additions done.")


async def test_a_turn_of_thirty_spell_calls_is_the_thought_one_group_of_steps_and_the_reply(
    codex_bin_169: Path,
    harness_factory: Callable[[Path, ScriptedModelServer], AgentHarness],
    tmp_path: Path,
    chromium_path: str,
) -> None:
    async with ScriptedModelServer(responder=respond_thirty) as server:
        h = harness_factory(codex_bin_169, server)
        h.write_base_config(approval_policy="on-request")
        await h.start("--spells", "coven_codex.demo.spells:spells")
        web = WebServer(h.journal_path, tmp_path)
        url = await web.start()
        errors: list[str] = []
        try:
            async with chromium(tmp_path / "profile") as browser:
                page = await open_page(browser, url + "#c=web", errors)
                await page.fill("#input", "thirty additions, please")
                await page.press("#input", "Enter")
                await page.wait_for_selector(".msg.response:has-text('thirty additions done.')", timeout=120_000)
                bubbles = await page.evaluate(
                    "[...document.getElementById('messages').children]"
                    ".filter(n => !n.classList.contains('status')).map(n => n.className)"
                )
                assert bubbles == ["msg thought", "msg steps", "msg response"], bubbles
                assert (await page.inner_text(".msg.steps > summary")).startswith("30 steps · ")
                assert errors == []
        finally:
            await web.stop()
