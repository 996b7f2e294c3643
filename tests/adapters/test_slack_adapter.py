"""The Slack adapter beyond the contract suite: Slack's limits, 429 bursts, DMs, threads, the slash command,
user groups, Slack's event retries, HTTP mode with signed requests, and the command's refusals.

Every test runs the real ``coven-codex slack`` process against the fake Slack (``slack_fake.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from running import append, running
from slack_fake import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, TEAM, actions_of, text_of
from slack_under_test import ROOT, SlackAdapter

from coven_codex.entries import BaseEntry, CancelEntry, ResetEntry, ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord


@pytest.fixture
async def slack(tmp_path: Path) -> AsyncIterator[SlackAdapter]:
    adapter = SlackAdapter(tmp_path, extra_config='allow_groups = ["SDEVS"]\n')
    adapter.fake.usergroups["SDEVS"] = ["UCAROL"]
    adapter.fake.users["UCAROL"] = "carol"
    async with running(adapter):
        yield adapter


async def _entries(path: Path) -> list[BaseEntry]:
    journal = FileJournal(path)
    try:
        return [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]
    finally:
        await journal.aclose()


async def _until(what: str, check: Callable[[], Awaitable[bool] | bool], timeout: float = 20) -> None:
    try:
        async with asyncio.timeout(timeout):
            while True:
                result = check()
                if await result if isinstance(result, Awaitable) else result:
                    return
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"never happened within {timeout} s: {what}") from None


def _shown(adapter: SlackAdapter, text: str, channel: str | None = None) -> list[dict[str, object]]:
    return [m for m in adapter.fake.bot_messages(channel) if text in text_of(m)]


async def _thoughts(adapter: SlackAdapter) -> list[ThoughtEntry]:
    return [e for e in await _entries(adapter.journal) if isinstance(e, ThoughtEntry)]


async def test_a_long_reply_is_split_within_slack_s_limits_and_escaped(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    words = [f"w{n:04}" for n in range(1800)]  # about 10,800 characters
    text = "**Results** <b> & co:\n\n" + " ".join(words)
    await append(slack.journal, ResponseEntry(text=text, conversation=conversation))
    await _until("the last word", lambda: bool(_shown(slack, words[-1])))
    messages = slack.fake.bot_messages("CGENERAL")
    screen = "\n".join(text_of(m) for m in messages)
    assert all(screen.count(word) == 1 for word in words)
    assert len(messages) >= 4 and all(m["thread_ts"] == slack.roots["general"] for m in messages)
    pieces = [b["text"] for m in messages for b in m["blocks"] if b["type"] == "markdown"]  # type: ignore[attr-defined, index]
    assert pieces and all(len(s) <= 3000 for s in pieces)
    assert "**Results** &lt;b&gt; &amp; co:" in screen  # Markdown kept; < > & escaped (no injected mention or link)


async def test_a_burst_of_429s_is_waited_out_and_nothing_is_dropped(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    slack.fake.burst = 4
    await append(slack.journal, *(ResponseEntry(text=f"reply {n:02}.", conversation=conversation) for n in range(20)))
    await _until("the last reply", lambda: bool(_shown(slack, "reply 19.")), timeout=40)
    screen = "\n".join(text_of(m) for m in slack.fake.bot_messages())
    assert all(screen.count(f"reply {n:02}.") == 1 for n in range(20))
    assert slack.fake.limited == 4
    assert screen.index("reply 00.") < screen.index("reply 19.")
    assert slack.stderr.read_text().count("rate-limits us") == 1  # said once, not once per 429


async def test_a_post_whose_answer_is_lost_is_found_not_posted_twice(slack: SlackAdapter) -> None:
    conversation = slack.conversation("general", "ann")
    slack.fake.drop_answers = 3
    await append(slack.journal, *(ResponseEntry(text=f"lost answer {n}.", conversation=conversation) for n in range(5)))
    await _until("the last reply", lambda: bool(_shown(slack, "lost answer 4.")), timeout=40)
    screen = "\n".join(text_of(m) for m in slack.fake.bot_messages())
    assert [screen.count(f"lost answer {n}.") for n in range(5)] == [1] * 5
    assert slack.fake.drop_answers == 0


async def test_a_top_level_mention_starts_a_thread_and_the_reply_goes_there(slack: SlackAdapter) -> None:
    ts = await slack.fake.mention("CRANDOM", "UANN", "hello from the top")
    await _until("the thought", lambda: _has_thought(slack, "hello from the top"))
    thought = (await _thoughts(slack))[-1]
    assert thought.conversation == f"slack:{TEAM}/CRANDOM/{ts}" and thought.sender == "ann (UANN)"
    await append(slack.journal, ResponseEntry(text="hi ann", conversation=thought.conversation))
    await _until("the reply", lambda: bool(_shown(slack, "hi ann")))
    assert _shown(slack, "hi ann")[0]["thread_ts"] == ts


async def _has_thought(adapter: SlackAdapter, text: str) -> bool:
    return any(t.text == text for t in await _thoughts(adapter))


async def test_a_direct_message_is_a_conversation_answered_in_the_dm(slack: SlackAdapter) -> None:
    await slack.fake.direct("DANN", "UANN", "a private question")
    await _until("the thought", lambda: _has_thought(slack, "a private question"))
    thought = (await _thoughts(slack))[-1]
    assert thought.conversation == f"slack:{TEAM}/DANN/"
    await append(slack.journal, ResponseEntry(text="a private answer", conversation=thought.conversation))
    await _until("the reply", lambda: bool(_shown(slack, "a private answer", "DANN")))
    assert "thread_ts" not in _shown(slack, "a private answer")[0]


async def test_images_come_in_and_other_files_or_foreign_hosts_are_refused_aloud(slack: SlackAdapter) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
    image = slack.fake.add_file(png, "image/png", "cat.png")
    text = slack.fake.add_file(b"hello", "text/plain", "notes.txt")
    foreign = dict(slack.fake.add_file(png, "image/png", "far.png"), url_private_download="http://192.0.2.1/far.png")
    await slack.fake.direct("DANN", "UANN", "look", [image, text, foreign])
    await _until("the thought", lambda: _has_thought(slack, "look"))
    thought = (await _thoughts(slack))[-1]
    assert [Path(a.url.removeprefix("file://")).read_bytes() for a in thought.attachments] == [png]
    assert Path(thought.attachments[0].url.removeprefix("file://")).parent == tmp_attachments(slack)
    assert _shown(slack, "notes.txt is not an image", "DANN")
    assert _shown(slack, "far.png was not passed to Codex", "DANN")


def tmp_attachments(adapter: SlackAdapter) -> Path:
    return adapter.journal.parent.resolve() / f"{adapter.journal.name}.attachments"


async def test_an_event_slack_delivers_again_is_one_thought(slack: SlackAdapter) -> None:
    event = slack.fake.user_message("CGENERAL", "UANN", "<@UBOT> only once", slack.roots["general"])
    event["type"] = "app_mention"
    payload = {"type": "event_callback", "team_id": TEAM, "api_app_id": "AFAKE", "event": event, "event_id": "Ev1"}
    first = await slack.fake.deliver("events_api", payload)
    await slack.fake.acked(first)
    second = await slack.fake.deliver("events_api", payload)  # Slack's retry of an event it thinks was lost
    await slack.fake.acked(second)
    await slack.fake.mention("CGENERAL", "UANN", "a later one", slack.roots["general"])
    await _until("the later thought", lambda: _has_thought(slack, "a later one"))
    assert [t.text for t in await _thoughts(slack)].count("only once") == 1


async def test_a_display_name_equal_to_an_allowed_id_does_not_let_anyone_in(slack: SlackAdapter) -> None:
    slack.fake.users["UEVE"] = "UANN"  # Eve names herself after Ann's member id
    await slack.fake.mention("CGENERAL", "UEVE", "eve pretends", slack.roots["general"])
    await _until("the refusal", lambda: bool(_shown(slack, "not allowed")))
    await slack.fake.mention("CGENERAL", "UANN", "ann is ann", slack.roots["general"])
    await _until("ann's thought", lambda: _has_thought(slack, "ann is ann"))
    assert not await _has_thought(slack, "eve pretends")


async def test_a_mention_made_while_the_adapter_was_killed_arrives_once_after_its_restart(slack: SlackAdapter) -> None:
    await slack.kill()
    await slack.fake.mention("CGENERAL", "UANN", "while you were down", slack.roots["general"])
    await slack.start()
    await slack.fake.mention("CGENERAL", "UANN", "after the restart", slack.roots["general"])
    await _until("both thoughts", lambda: _has_thought(slack, "after the restart"))
    await _until("the first thought", lambda: _has_thought(slack, "while you were down"))
    texts = [t.text for t in await _thoughts(slack)]
    assert texts.count("while you were down") == 1 and texts.count("after the restart") == 1


async def test_members_of_an_allowed_user_group_may_talk_and_others_may_not(slack: SlackAdapter) -> None:
    await slack.fake.mention("CGENERAL", "UCAROL", "carol is in the group", slack.roots["general"])
    await slack.fake.mention("CGENERAL", "USTRANGER", "stranger is not", slack.roots["general"])
    await _until("carol's thought", lambda: _has_thought(slack, "carol is in the group"))
    await _until("the refusal", lambda: bool(_shown(slack, "not allowed")))
    assert not [e for e in await _entries(slack.journal) if "stranger" in e.text or e.sender == "stranger"]


async def test_the_slash_command_runs_the_kit_commands_in_the_user_s_thread(slack: SlackAdapter) -> None:
    # No thread yet in this channel for this user: the answer says how, and nothing is appended.
    envelope = await slack.fake.slash("CRANDOM", "UANN", "cancel")
    answer = await slack.fake.acked(envelope)
    assert "mention me in that thread" in str(answer.get("text"))
    await slack.fake.mention("CGENERAL", "UANN", "start here", slack.roots["general"])
    await _until("the thought", lambda: _has_thought(slack, "start here"))
    await slack.fake.acked(await slack.fake.slash("CGENERAL", "UANN", "cancel"))
    await _until("the cancel", lambda: _has(slack, CancelEntry))
    await slack.fake.acked(await slack.fake.slash("CGENERAL", "UANN", "status"))
    await _until("the status", lambda: bool(_shown(slack, "queued messages")))
    assert _shown(slack, "queued messages")[0]["thread_ts"] == slack.roots["general"]
    cancel = next(e for e in await _entries(slack.journal) if isinstance(e, CancelEntry))
    assert cancel.conversation == slack.conversation("general", "ann")
    await slack.fake.mention("CGENERAL", "UBOB", "bob too", slack.roots["general"])
    await _until("bob's thought", lambda: _has_thought(slack, "bob too"))
    await slack.fake.acked(await slack.fake.slash("CGENERAL", "UBOB", "new"))
    await _until("the refusal of /new", lambda: bool(_shown(slack, "Only an admin")))


async def test_the_slash_command_alone_shows_the_commands_as_buttons_for_the_thread(slack: SlackAdapter) -> None:
    await slack.fake.mention("CGENERAL", "UANN", "start here", slack.roots["general"])
    await _until("the thought", lambda: _has_thought(slack, "start here"))
    menu = await slack.fake.acked(await slack.fake.slash("CGENERAL", "UANN", ""))
    buttons = {e["value"]: e["action_id"] for b in menu["blocks"] if b["type"] == "actions" for e in b["elements"]}
    assert set(buttons) == {"cancel", "new", "status", "help"}
    # the menu is not in the thread (Slack shows it to the user only): its buttons name the thread
    await slack.fake.acked(await slack.fake.press("CGENERAL", "UANN", "new", "", "", action_id=buttons["new"]))
    await slack.fake.acked(await slack.fake.press("CGENERAL", "UANN", "status", "", "", action_id=buttons["status"]))
    await _until("the status", lambda: bool(_shown(slack, "queued messages")))
    assert _shown(slack, "queued messages")[0]["thread_ts"] == slack.roots["general"]
    reset = next(e for e in await _entries(slack.journal) if isinstance(e, ResetEntry))
    assert reset.conversation == slack.conversation("general", "ann")


async def _has(adapter: SlackAdapter, kind: type[BaseEntry]) -> bool:
    return any(isinstance(e, kind) for e in await _entries(adapter.journal))


async def test_a_streamed_reply_carries_a_cancel_button_that_cancels(slack: SlackAdapter) -> None:
    from coven_codex.entries import DeltaEntry, StatusEntry

    conversation = slack.conversation("general", "ann")
    await append(
        slack.journal,
        StatusEntry(state="turn_started", conversation=conversation),
        DeltaEntry(text="working on it", item_id="i1", conversation=conversation),
    )
    await _until("the streamed message", lambda: bool(_shown(slack, "working on it")))
    streamed = _shown(slack, "working on it")[0]
    assert actions_of(streamed) == ("cancel",)
    await slack.press("general", "ann", "cancel")
    await _until("the cancel", lambda: _has(slack, CancelEntry))


async def test_tokens_never_reach_the_log(tmp_path: Path) -> None:
    adapter = SlackAdapter(tmp_path)
    await adapter.start()
    try:
        await adapter.say("general", "ann", "hello")
        await _until("the thought", lambda: _has_thought(adapter, "hello"))
    finally:
        await adapter.close()
    log = adapter.stderr.read_text()
    assert "connected as UBOT" in log
    assert BOT_TOKEN not in log and APP_TOKEN not in log and BOT_TOKEN.split("-")[-1] not in log


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _signed(body: bytes, secret: str = SIGNING_SECRET) -> dict[str, str]:
    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}", "Content-Type": "application/json"}


async def test_http_mode_takes_signed_events_and_refuses_unsigned_ones(tmp_path: Path) -> None:
    port = _free_port()
    adapter = SlackAdapter(tmp_path, extra_config=f'mode = "http"\nhttp_port = {port}\n')
    os.environ["SLACK_SIGNING_SECRET"] = SIGNING_SECRET
    try:
        await adapter.start()
        event = adapter.fake.user_message("CGENERAL", "UANN", "<@UBOT> over http", adapter.roots["general"])
        event["type"] = "app_mention"
        body = json.dumps({"type": "event_callback", "team_id": TEAM, "api_app_id": "AFAKE", "event": event}).encode()
        url = f"http://127.0.0.1:{port}/slack/events"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=body, headers=_signed(body, "f" * 32)) as forged:
                assert forged.status == 401
            async with session.post(url, data=body, headers=_signed(body)) as signed:
                assert signed.status == 200
        await _until("the thought", lambda: _has_thought(adapter, "over http"))
        assert [t.text for t in await _thoughts(adapter)] == ["over http"]
    finally:
        del os.environ["SLACK_SIGNING_SECRET"]
        await adapter.close()


def _command(tmp_path: Path, config: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "coven.toml"
    path.write_text(config)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "coven-codex"), "slack", "--config", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
        cwd=ROOT,
    )


def test_the_command_refuses_clearly_what_it_cannot_run(tmp_path: Path) -> None:
    journal = f'journal = "{tmp_path / "journal.jsonl"}"\n'
    tokens = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN}
    cases = [
        (journal, tokens, "has no [adapters.slack] section"),
        (journal + "[adapters.slack]\n", tokens, "allows nobody"),
        (journal + f'[adapters.slack]\nallow_users = ["U1"]\ntoken = "{BOT_TOKEN}"\n', tokens, "never written"),
        (journal + '[adapters.slack]\nallow_users = ["U1"]\n', {}, "set the environment variable SLACK_BOT_TOKEN"),
        (journal + '[adapters.slack]\nallow_users = ["U1"]\n', {**tokens, "SLACK_APP_TOKEN": "x"}, "xapp-"),
        ('[adapters.slack]\nallow_users = ["U1"]\n', tokens, "no journal"),
    ]
    for config, env, expected in cases:
        done = _command(tmp_path, config, env)
        assert done.returncode == 2, (config, done.stderr)
        assert expected in done.stderr, (expected, done.stderr)
        assert BOT_TOKEN not in done.stderr


async def test_a_token_slack_refuses_stops_the_adapter_with_what_to_do(tmp_path: Path) -> None:
    adapter = SlackAdapter(tmp_path)
    await adapter._start_fake()
    try:
        wrong = "xoxb-9999999999-9999999999-NotTheRightOne00"
        done = await asyncio.to_thread(
            _command, tmp_path, adapter.config.read_text(), {"SLACK_BOT_TOKEN": wrong, "SLACK_APP_TOKEN": APP_TOKEN}
        )
        assert done.returncode == 1, done.stderr
        assert "invalid_auth" in done.stderr and "copy it again" in done.stderr and wrong not in done.stderr
        wrong_app = "xapp-1-AFAKE-9999999999-notthisonenotthisone00"
        done = await asyncio.to_thread(
            _command, tmp_path, adapter.config.read_text(), {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": wrong_app}
        )
        assert done.returncode == 1, done.stderr
        assert "Slack refused Socket Mode (invalid_auth)" in done.stderr and "SLACK_APP_TOKEN" in done.stderr
        assert wrong_app not in done.stderr
    finally:
        await adapter.fake.stop()
