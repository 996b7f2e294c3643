"""The Discord adapter's REST side against a local fake of Discord's API, through discord.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from discord_fake import CHANNEL_ID, GUILD_ID, ROLE_ID, FakeDiscord

from coven_codex.adapters.discord.gateway import DiscordGateway
from coven_codex.adapters.discord.rest import DiscordRest, nonce_for, set_api_base, set_gateway_url
from coven_codex.adapters.kit.platform import (
    Address,
    Button,
    ButtonPress,
    IncomingMessage,
    Outgoing,
    PlatformError,
    RateLimited,
)
from coven_codex.support.secret import Secret

CHANNEL = Address(channel=CHANNEL_ID, workspace=GUILD_ID)


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    state = FakeDiscord()
    runner = web.AppRunner(state.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    set_api_base(f"http://127.0.0.1:{port}/api/v10")
    set_gateway_url(f"ws://127.0.0.1:{port}/gateway")
    yield state
    await runner.cleanup()


async def test_bad_token_is_a_clear_error(fake: FakeDiscord) -> None:
    with pytest.raises(PlatformError, match="refused the bot token"):
        await DiscordRest(Secret("bad-token")).start()


async def test_post_edit_delete_typing_and_buttons(fake: FakeDiscord) -> None:
    rest = DiscordRest(Secret("good-token"))
    assert await rest.start() == "1000000000000000001"
    try:
        mid = await rest.post(CHANNEL, Outgoing("hello", buttons=(Button("Approve", "approve r1"),)), "k1")
        assert fake.messages[mid].content == "hello"
        button = fake.messages[mid].components[0]["components"][0]
        assert button["custom_id"] == "approve r1" and button["label"] == "Approve"
        await rest.edit(CHANNEL, mid, Outgoing("hello, world"))
        assert fake.messages[mid].content == "hello, world"
        assert fake.messages[mid].components == []
        await rest.typing(CHANNEL, True)
        assert fake.typing == [CHANNEL.channel]
        await rest.delete(CHANNEL, mid)
        assert fake.deleted == [mid]
    finally:
        await rest.close()


async def test_a_repeated_post_is_one_message_and_find_sees_it(fake: FakeDiscord) -> None:
    rest = DiscordRest(Secret("good-token"))
    await rest.start()
    try:
        assert await rest.find(CHANNEL, "entry-7") is None
        first = await rest.post(CHANNEL, Outgoing("once"), "entry-7")
        again = await rest.post(CHANNEL, Outgoing("once"), "entry-7")
        assert first == again
        assert len(fake.in_channel(CHANNEL.channel)) == 1
        assert fake.messages[first].nonce == nonce_for("entry-7")
        assert await rest.find(CHANNEL, "entry-7") == first
        assert await rest.find(CHANNEL, "entry-8") is None
    finally:
        await rest.close()


async def test_a_burst_of_429s_drops_nothing(fake: FakeDiscord) -> None:
    fake.rate_limit_every = 3
    rest = DiscordRest(Secret("good-token"))
    await rest.start()
    try:
        for i in range(30):
            while True:
                try:
                    await rest.post(CHANNEL, Outgoing(f"m{i}"), f"key-{i}")
                    break
                except RateLimited as exc:
                    assert exc.retry_after >= 0
        texts = [m.content for m in fake.in_channel(CHANNEL.channel)]
        assert texts == [f"m{i}" for i in range(30)]
        assert fake.rate_limited >= 10
    finally:
        await rest.close()


async def test_a_long_429_is_handed_to_the_runner(fake: FakeDiscord) -> None:
    fake.rate_limit_every = 2
    fake.retry_after = 31.0
    rest = DiscordRest(Secret("good-token"))
    await rest.start()
    try:
        with pytest.raises(RateLimited) as caught:
            await rest.post(CHANNEL, Outgoing("later"), "key-late")
        assert caught.value.retry_after == pytest.approx(31.0)
        assert fake.in_channel(CHANNEL.channel) == []
    finally:
        await rest.close()


async def test_gateway_events_become_the_kits_incoming(fake: FakeDiscord) -> None:
    gateway = DiscordGateway()
    await gateway.login("good-token")
    runner = asyncio.create_task(gateway.connect(reconnect=False))
    try:
        async with asyncio.timeout(20):
            await gateway.wait_until_ready()
            events = gateway.events()
            await fake.dispatch(
                "MESSAGE_CREATE", fake.user_message("5000000000000000001", "hi codex", roles=(ROLE_ID,))
            )
            await fake.dispatch(
                "MESSAGE_CREATE", fake.user_message("5000000000000000002", "not for the bot", mention=False)
            )
            await fake.dispatch("MESSAGE_CREATE", fake.user_message("5000000000000000003", "second"))
            first = await anext(events)
            assert isinstance(first, IncomingMessage)
            assert first.text == "hi codex" and first.user.id == "5000000000000000001"
            assert first.user.roles == frozenset({ROLE_ID})
            assert first.address == Address(channel=CHANNEL_ID, workspace=GUILD_ID)
            second = await anext(events)
            assert isinstance(second, IncomingMessage) and second.text == "second"
            rest = DiscordRest(Secret("good-token"))
            await rest.start()
            try:
                mid = await rest.post(
                    second.address, Outgoing("approve?", buttons=(Button("Approve", "approve r1"),)), "k"
                )
            finally:
                await rest.close()
            await fake.dispatch("INTERACTION_CREATE", fake.button_press("5000000000000000001", mid, "approve r1"))
            press = await anext(events)
            assert press == ButtonPress(second.address, press.user, "approve r1", mid)
            assert press.user.id == "5000000000000000001"
            assert fake.interactions and fake.interactions[0]["type"] == 6
    finally:
        await gateway.close()
        await runner
