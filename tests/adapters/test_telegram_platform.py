"""The Telegram platform (python-telegram-bot's real Bot) against the fake Bot API: every answer classified,
the markup fallback, edits, typing, buttons, budgets. The adapter as a process is in ``test_telegram_process.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from bad_day import HTML_502, Fault
from telegram_fake import TEST_TOKEN, FakeTelegram

from coven_codex.adapters.kit.budget import Budgets, Rate, Scope
from coven_codex.adapters.kit.commands import COMMANDS
from coven_codex.adapters.kit.config import TelegramSection
from coven_codex.adapters.kit.platform import (
    Address,
    Button,
    ButtonPress,
    IncomingMessage,
    Outgoing,
    PlatformError,
    RateLimited,
    Refusal,
    Unavailable,
)
from coven_codex.adapters.telegram.platform import TelegramPlatform, budgets, make_bot
from coven_codex.support.secret import Secret

GROUP = -1001000000001
PRIVATE = Address(channel="5001")
TOPIC = Address(channel=str(GROUP), thread="11")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as state:
        yield state


@pytest.fixture
async def platform(fake: FakeTelegram) -> AsyncIterator[TelegramPlatform]:
    bot = make_bot(Secret(TEST_TOKEN), fake.base)
    telegram = TelegramPlatform(bot, poll_timeout=1, typing_every=0.1)
    await telegram.start()
    try:
        yield telegram
    finally:
        await telegram.close()
        await bot.shutdown()


async def test_start_logs_in_and_registers_the_kits_commands(platform: TelegramPlatform, fake: FakeTelegram) -> None:
    assert fake.requests["getMe"] >= 1 and fake.requests["deleteWebhook"] == 1
    # every command of the kit, in its order, as Telegram allows a name (no "-")
    assert [c["command"] for c in fake.commands] == [name.replace("-", "_") for name in COMMANDS]
    assert "list" in COMMANDS and "history" in COMMANDS
    assert {"project", "model", "mode"} <= set(COMMANDS)


async def test_a_reply_is_html_in_its_topic_with_its_buttons(platform: TelegramPlatform, fake: FakeTelegram) -> None:
    message_id = await platform.post(
        TOPIC, Outgoing("<b>codex:</b> a &lt;b&gt; tag", buttons=(Button("Cancel", "cancel"),)), "k"
    )
    [shown] = fake.in_chat(GROUP, 11)
    assert str(shown.message_id) == message_id and shown.parse_mode == "HTML"
    assert shown.text == "codex: a <b> tag" and shown.buttons == [("Cancel", "cancel")]


async def test_markup_telegram_refuses_is_sent_again_at_once_as_plain_text(
    platform: TelegramPlatform, fake: FakeTelegram
) -> None:
    refusal = {
        "ok": False,
        "error_code": 400,
        "description": "Bad Request: can't parse entities: Unsupported start tag",
    }
    fake.faults.add(Fault(status=400, body=refusal, route="sendMessage", text="odd"))
    await platform.post(PRIVATE, Outgoing("<b>codex:</b> odd &amp; <i>markup</i>"), "k")
    [shown] = fake.in_chat(5001)
    assert shown.parse_mode is None and shown.text == "codex: odd & markup"


async def test_an_unchanged_edit_is_no_error_and_an_edit_without_buttons_clears_them(
    platform: TelegramPlatform, fake: FakeTelegram
) -> None:
    message_id = await platform.post(
        PRIVATE, Outgoing("streaming", buttons=(Button("Cancel", "cancel"),), final=False), "k"
    )
    await platform.edit(PRIVATE, message_id, Outgoing("streaming", buttons=(Button("Cancel", "cancel"),), final=False))
    await platform.edit(PRIVATE, message_id, Outgoing("done"))
    [shown] = fake.in_chat(5001)
    assert shown.text == "done" and shown.buttons == [] and shown.edits == 1


@pytest.mark.parametrize(
    ("fault", "expected", "refusal"),
    [
        (
            Fault(
                status=429,
                body={
                    "ok": False,
                    "error_code": 429,
                    "description": "Too Many Requests: retry after 7",
                    "parameters": {"retry_after": 7},
                },
            ),
            RateLimited,
            None,
        ),
        (Fault(status=502, body=HTML_502), Unavailable, None),
        (
            Fault(status=500, body={"ok": False, "error_code": 500, "description": "Internal Server Error"}),
            Unavailable,
            None,
        ),
        (Fault(cut="before"), Unavailable, None),
        (Fault(cut="after"), Unavailable, None),
        (
            Fault(
                status=403,
                body={"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"},
            ),
            PlatformError,
            Refusal.CHANNEL,
        ),
        (
            Fault(status=400, body={"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}),
            PlatformError,
            Refusal.CHANNEL,
        ),
        (
            Fault(
                status=400,
                body={"ok": False, "error_code": 400, "description": "Bad Request: message thread not found"},
            ),
            PlatformError,
            Refusal.CHANNEL,
        ),
        (
            Fault(status=400, body={"ok": False, "error_code": 400, "description": "Bad Request: message is too long"}),
            PlatformError,
            Refusal.ENTRY,
        ),
        (
            Fault(status=401, body={"ok": False, "error_code": 401, "description": "Unauthorized"}),
            PlatformError,
            Refusal.FATAL,
        ),
        (
            Fault(
                status=400,
                body={
                    "ok": False,
                    "error_code": 400,
                    "description": "Bad Request: group chat was upgraded to a supergroup chat",
                    "parameters": {"migrate_to_chat_id": -1009},
                },
            ),
            PlatformError,
            Refusal.CHANNEL,
        ),
    ],
    ids=[
        "429",
        "502-html",
        "500-json",
        "cut-before",
        "cut-after",
        "403-blocked",
        "chat-not-found",
        "topic-gone",
        "too-long",
        "401",
        "migrated",
    ],
)
async def test_every_answer_of_telegram_is_one_of_the_kits_classes(
    platform: TelegramPlatform, fake: FakeTelegram, fault: Fault, expected: type[Exception], refusal: Refusal | None
) -> None:
    fault.route = "sendMessage"
    fake.faults.add(fault)
    with pytest.raises(expected) as raised:
        await platform.post(PRIVATE, Outgoing("hello"), "k")
    if refusal is not None:
        assert isinstance(raised.value, PlatformError) and raised.value.refusal is refusal
    if isinstance(raised.value, RateLimited):
        assert raised.value.retry_after == 7


async def test_typing_is_repeated_until_the_turn_ends(platform: TelegramPlatform, fake: FakeTelegram) -> None:
    await platform.typing(TOPIC, True)
    async with asyncio.timeout(10):
        while len(fake.typing) < 3:
            await asyncio.sleep(0.05)
    await platform.typing(TOPIC, False)
    count = len(fake.typing)
    await asyncio.sleep(0.3)
    assert len(fake.typing) == count and set(fake.typing) == {(GROUP, 11)}


async def test_a_button_press_is_answered_and_becomes_the_kits_action(
    platform: TelegramPlatform, fake: FakeTelegram
) -> None:
    long_action = "approve " + "r" * 80  # past Telegram's 64 bytes of callback_data
    await platform.post(TOPIC, Outgoing("approval needed", buttons=(Button("Approve", long_action),)), "k")
    [shown] = fake.in_chat(GROUP, 11)
    assert len(shown.buttons[0][1].encode()) <= 64
    fake.press(5001, shown, shown.buttons[0][1])
    events = platform.incoming()
    async with asyncio.timeout(10):
        press = await anext(events)
    assert isinstance(press, ButtonPress) and press.action == long_action and press.address == TOPIC
    assert press.user.id == "5001" and len(fake.answered) == 1


async def test_the_bot_ignores_other_bots_and_unaddressed_group_messages(
    platform: TelegramPlatform, fake: FakeTelegram
) -> None:
    fake.user_message(5001, "not for the bot", chat_id=GROUP)
    fake.user_message(6001, "hello", chat_id=GROUP, mention=True, bot=True)
    fake.user_message(5001, "/status@other_bot", chat_id=GROUP)
    fake.user_message(5001, "hello from the topic", chat_id=GROUP, thread=11, mention=True)
    [reply_to] = [await platform.post(Address(channel=str(GROUP)), Outgoing("a reply of the bot"), "k")]
    fake.user_message(5002, "a reply to the bot", chat_id=GROUP, reply_to=fake.messages[(GROUP, int(reply_to))])
    fake.user_message(5002, "/status@coven_bot", chat_id=GROUP)
    fake.user_message(5001, "in private")
    fake.user_message(5002, "/start")
    events = platform.incoming()
    got: list[IncomingMessage] = []
    async with asyncio.timeout(10):
        while len(got) < 5:
            event = await anext(events)
            assert isinstance(event, IncomingMessage)
            got.append(event)
    assert [(e.address, e.text) for e in got] == [
        (TOPIC, "hello from the topic"),
        (Address(channel=str(GROUP)), "a reply to the bot"),
        (Address(channel=str(GROUP)), "/status"),
        (PRIVATE, "in private"),
        (Address(channel="5002"), "/help"),  # Telegram's /start: a user's first tap on the bot
    ]
    assert [e.user.id for e in got] == ["5001", "5002", "5002", "5001", "5002"]


async def _five_streams(fake: FakeTelegram, budgets: Budgets) -> None:
    """Five streams in five topics of one group, each posted and edited four times, all at once."""
    bot = make_bot(Secret(TEST_TOKEN), fake.base)
    telegram = TelegramPlatform(bot, budgets=budgets)
    await telegram.start()
    try:

        async def stream(topic: int) -> None:
            address = Address(channel=str(GROUP), thread=str(topic))
            message_id = await telegram.post(address, Outgoing("part 0", final=False), None)
            for n in range(1, 5):
                await telegram.edit(address, message_id, Outgoing(f"part {n}", final=n == 4))

        async with asyncio.timeout(60):
            await asyncio.gather(*(stream(topic) for topic in range(21, 26)), return_exceptions=True)
    finally:
        await telegram.close()
        await bot.shutdown()


async def test_with_the_budgets_on_five_streams_never_exceed_a_groups_limit(fake: FakeTelegram) -> None:
    """Telegram allows a group about 20 messages a minute: 25 writes at once exceed it; with the
    group budget (20 a minute, used at 90%) the same writes wait for their turn and none is refused."""
    fake.chat_limit = (20, 60.0)
    await _five_streams(fake, Budgets({}))
    assert fake.limited > 0
    fake.limited, fake.requests = 0, {}
    fake._chat_writes.clear()
    await _five_streams(fake, Budgets({"group": Rate(20, 60.0, Scope.CHANNEL)}))
    writes = fake.requests.get("sendMessage", 0) + fake.requests.get("editMessageText", 0)
    assert fake.limited == 0 and writes == 25, (fake.limited, writes)


async def test_with_the_default_budgets_a_private_chats_stream_keeps_to_one_write_a_second(fake: FakeTelegram) -> None:
    """Telegram asks for about one message a second in a chat: a stream posted and edited six times
    at once keeps to that pace with the default budgets (a minute's 60 in one burst, as the chat's
    bucket once held, drew 429s)."""
    fake.chat_limit = (1, 1.0)
    bot = make_bot(Secret(TEST_TOKEN), fake.base)
    platform = TelegramPlatform(bot, budgets=budgets(TelegramSection(allow_users=["1"])))
    await platform.start()
    try:
        async with asyncio.timeout(60):
            message_id = await platform.post(PRIVATE, Outgoing("part 0", final=False), None)
            for n in range(1, 6):
                await platform.edit(PRIVATE, message_id, Outgoing(f"part {n}", final=n == 5))
    finally:
        await platform.close()
        await bot.shutdown()
    assert fake.limited == 0
    assert fake.requests.get("sendMessage", 0) == 1 and fake.requests.get("editMessageText", 0) == 5
