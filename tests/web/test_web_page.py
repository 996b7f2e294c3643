"""The page in real headless Chromium, over a journal written by the test (no daemon): two tabs,
reload, images, hostile text, and kill -9 of the page server while 200 entries flow."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pytest
from web_helpers import WebServer, chromium, message_ids, message_texts, open_page, png

from coven_codex.entries import ApprovalRequestEntry, DeltaEntry, ResponseEntry, StatusEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord

pytestmark = pytest.mark.timeout(240)


async def test_two_tabs_stay_in_sync_and_a_reload_keeps_history(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ThoughtEntry(conversation="room", sender="ada", text="earlier question"))
    await journal.append(ResponseEntry(conversation="room", text="earlier **answer**"))
    await journal.append(ResponseEntry(conversation="elsewhere", text="not in this room"))
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        first = await open_page(browser, url + "#c=room", errors)
        second = await open_page(browser, f"{web_server.base}/#c=room", errors)  # the device key logs it in: no token
        for tab in (first, second):
            await tab.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 2")
            assert await message_texts(tab, "response") == ["earlier answer"]
            assert "token" not in tab.url
        names = await first.eval_on_selector_all("#conversations button", "b => b.map(x => x.textContent)")
        assert sorted(names) == ["elsewhere", "room"]
        await first.fill("#input", "hello from the first tab")
        await first.press("#input", "Enter")
        for tab in (first, second):
            await tab.wait_for_function(
                "() => [...document.querySelectorAll('.msg.thought')].some("
                "n => n.textContent.includes('hello from the first tab'))"
            )
        await journal.append(ResponseEntry(conversation="room", text="reply to both"))
        for tab in (first, second):
            await tab.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 4")
        await second.reload()
        await second.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 4")
        assert await message_ids(second) == await message_ids(first)
        assert await message_texts(second, "thought") == ["earlier question", "hello from the first tab"]
        await first.click("#conversations button[data-conversation='elsewhere']")
        await first.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 1")
        assert await message_texts(first, "response") == ["not in this room"]
        assert errors == []
    written = [i.entry for i in await journal.read() if isinstance(i, JournalRecord)]
    thoughts = [e for e in written if isinstance(e, ThoughtEntry) and e.text == "hello from the first tab"]
    assert len(thoughts) == 1 and thoughts[0].sender == "tester" and thoughts[0].conversation == "room"
    await journal.aclose()


async def test_hostile_text_is_shown_as_text_and_runs_nothing(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    journal = FileJournal(web_server.journal, durability="never")
    attack = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
    await journal.append(ResponseEntry(conversation="x", text=f"look {attack} [go](javascript:window.pwned=3)"))
    await journal.append(ApprovalRequestEntry(conversation="x", request_id='r"1', action=attack))
    await journal.append(StatusEntry(conversation="x", state=attack))
    await journal.append(DeltaEntry(conversation="x", item_id="i", text=attack))
    url = await web_server.start()
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=x", errors)
        await page.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 4")
        assert await page.evaluate("window.pwned") is None
        assert (
            await page.eval_on_selector_all(
                "#messages img, #messages script, #messages a[href^=javascript]", "n => n.length"
            )
            == 0
        )
        assert attack in await page.inner_text("#messages")
        assert errors == []
    await journal.aclose()


async def test_an_uploaded_image_goes_with_the_thought(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    url = await web_server.start()
    image = tmp_path / "picture.png"
    image.write_bytes(png(8, 8))
    errors: list[str] = []
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=pics", errors)
        await page.set_input_files("#file", str(image))
        await page.wait_for_selector("#attachments img")
        await page.fill("#input", "what is in this picture?")
        await page.click("#send")
        await page.wait_for_selector(".msg.thought img.attachment")
        loaded = await page.eval_on_selector(".msg.thought img.attachment", "i => i.complete && i.naturalWidth")
        assert loaded == 8
        await page.click("#reset")
        await page.wait_for_selector(".msg.reset")
        assert errors == []
    lines = [json.loads(line) for line in web_server.journal.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["thought", "reset"]
    attachment = lines[0]["attachments"][0]
    assert Path(attachment["url"].removeprefix("file://")).read_bytes() == image.read_bytes()
    assert attachment["media_type"] == "image/png"


@pytest.mark.slow
async def test_kill9_of_the_page_server_while_200_entries_flow_loses_and_repeats_nothing(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    journal = FileJournal(web_server.journal, durability="never")
    url = await web_server.start()
    errors: list[str] = []
    total, kills = 200, 6
    written: list[int] = [0]
    killed_at: list[int] = []
    expected = [f"entry {n:03d}" for n in range(total)]
    async with chromium(tmp_path / "profile") as browser:
        page = await open_page(browser, url + "#c=flow", errors)

        # Kills fall at random entry counts, not at random times: on a loaded machine the writer
        # could otherwise finish before the last kill (the entries would no longer be flowing).
        points = sorted(rng.sample(range(5, total - 5), kills))
        progress = asyncio.Condition()
        kills_done = asyncio.Event()

        async def write() -> None:
            for n, text in enumerate(expected):
                if n == total - 1:  # the last entry waits for the last kill: every kill falls mid-flow
                    await asyncio.wait_for(kills_done.wait(), 120)
                await journal.append(ResponseEntry(conversation="flow", text=text))
                async with progress:
                    written[0] = n + 1
                    progress.notify_all()
                if n % 3 == 0:  # other conversations' entries flow too
                    await journal.append(ResponseEntry(conversation=f"other-{n % 7}", text=text))
                await asyncio.sleep(rng.uniform(0.02, 0.08))

        async def kill() -> None:
            for point in points:
                async with progress:
                    await asyncio.wait_for(progress.wait_for(lambda p=point: written[0] >= p), 120)
                killed_at.append(written[0])
                await web_server.kill9()
                await asyncio.sleep(rng.uniform(0.0, 0.3))
                await web_server.start()
            kills_done.set()

        await asyncio.gather(write(), kill())
        deadline = time.monotonic() + 60
        while len(await message_ids(page)) < total and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # anything still on its way would show up now
        texts = await message_texts(page, "response")
        ids = await message_ids(page)
        assert len(ids) == len(set(ids)), f"seed {seed}: a message id is on the page twice"
        assert texts == expected, (
            f"seed {seed}: {len(texts)} messages on the page; missing "
            f"{sorted(set(expected) - set(texts))[:10]}, repeated "
            f"{[t for t in set(texts) if texts.count(t) > 1][:10]}"
        )
        assert web_server.runs == kills + 1
        assert all(0 < k < total for k in killed_at), f"kills must fall while entries flow: {killed_at}"
        assert errors == []
    await journal.aclose()


async def test_on_a_name_that_is_not_loopback_the_login_lasts_as_long_as_the_tab(
    web_server: WebServer, tmp_path: Path, chromium_path: str
) -> None:
    """Plain HTTP on another name is no secure context: no WebCrypto, so no device key is kept;
    the tab stays logged in (reconnects included) and a reload asks for the printed address."""
    journal = FileJournal(web_server.journal, durability="never")
    await journal.append(ResponseEntry(conversation="c", text="hello over the network"))
    await journal.aclose()
    await web_server.start("--allowed-host", "devbox.example")
    url = f"http://devbox.example:{web_server.port}/?token={web_server.token}#c=c"
    errors: list[str] = []
    async with chromium(tmp_path / "profile", "--host-resolver-rules=MAP devbox.example 127.0.0.1") as browser:
        page = await open_page(browser, url, errors)
        assert not await page.evaluate("window.isSecureContext") and "token" not in page.url
        await page.wait_for_selector(".msg.response")
        await web_server.stop()  # the tab reconnects to a restarted server with the token in its memory
        await page.wait_for_function("() => document.getElementById('connection').textContent === 'reconnecting…'")
        await web_server.start("--allowed-host", "devbox.example")
        await page.wait_for_function("() => document.getElementById('connection').textContent === 'connected'")
        await page.reload()
        await page.wait_for_function("() => document.getElementById('connection').textContent === 'not logged in'")
        assert "printed" in await page.inner_text("#notice")
        assert errors == []
