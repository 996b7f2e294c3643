"""The one bounded listener (coven_codex/support/listener.py) under the metrics port and the OTLP
receiver: a connection that does not end when closed is cancelled after CLOSE_WAIT, and a port that
cannot be listened on is refused with what to do."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from coven_codex.metrics.instruments import Instruments
from coven_codex.metrics.server import MetricsServer
from coven_codex.support.listener import CLOSE_WAIT, BoundedListener
from coven_codex.traces.receiver import OtlpReceiver
from coven_codex.traces.writer import JsonlWriter


class Stubborn(BoundedListener):
    """Holds every connection until cancelled, whatever the client or the close does."""

    name = "the stubborn listener"
    purpose = "hold connections"
    remedy = "pick another port"

    def __init__(self) -> None:
        super().__init__("127.0.0.1", 0)
        self.holding = asyncio.Event()
        self.cancelled = 0

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.holding.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


async def test_a_connection_that_outlives_the_close_is_cancelled_after_the_close_wait() -> None:
    listener = Stubborn()
    async with listener:
        _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        await asyncio.wait_for(listener.holding.wait(), 10)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(listener.aclose(), CLOSE_WAIT + 10)
        took = loop.time() - started
    writer.close()
    assert listener.cancelled == 1
    assert CLOSE_WAIT * 0.9 <= took < CLOSE_WAIT + 5
    with pytest.raises(RuntimeError, match="the stubborn listener is not started"):
        _ = listener.port


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda _tmp, port: MetricsServer(Instruments(), port=port), "cannot serve metrics on 127.0.0.1:"),
        (
            lambda tmp, port: OtlpReceiver(JsonlWriter(tmp / "traces.jsonl"), port=port),
            "cannot listen for OpenTelemetry data on 127.0.0.1:",
        ),
    ],
    ids=["metrics", "otlp"],
)
async def test_both_servers_refuse_a_taken_port_with_what_to_do(
    tmp_path: Path, make: Callable[[Path, int], BoundedListener], says: str
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(OSError, match="pick another") as refused:
            async with make(tmp_path, port):
                pass
    assert str(refused.value).startswith(f"{says}{port} (")
