"""``coven-codex webhooks`` as a real process: kill -9 mid-retry loses no turn; options and settings errors."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from webhook_journal import SECRET, turn

from coven_codex.journal import FileJournal
from coven_codex.testing.webhook_receiver import HANG, Answer, WebhookReceiver

ROOT = Path(__file__).resolve().parents[2]


async def start_command(journal: Path, url: str, log: Path) -> asyncio.subprocess.Process:
    argv = [sys.executable, "-m", "coven_codex", "webhooks", "--journal", str(journal), "--url", url, "--name", "test"]
    argv += ["--secret-env", "TEST_WEBHOOK_SECRET", "--timeout", "0.5", "--max-delay", "1", "--start", "beginning"]
    env = {**os.environ, "TEST_WEBHOOK_SECRET": SECRET, "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(*argv, stdout=out, stderr=out, env=env, cwd=str(ROOT))


async def test_kill_9_mid_retry_loses_no_turn_and_keeps_the_keys(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    ends = [await turn(journal, conversation, n) for n in range(3) for conversation in ("red", "blue")]
    expected = [record.entry.id for record in ends]
    log = tmp_path / "webhooks.log"
    async with WebhookReceiver(SECRET.encode(), answers=[200, 200], default=500) as receiver:
        process = await start_command(path, receiver.url, log)
        try:
            await receiver.wait_until(lambda r: len(r.received) >= 5, timeout=60)  # two delivered, then retrying
            process.send_signal(signal.SIGKILL)
            await process.wait()
            receiver.default = 200
            await turn(journal, "red", 9)  # written while no sender runs
            process = await start_command(path, receiver.url, log)
            await receiver.wait_until(
                lambda r: {q.key for q in r.acknowledged} >= {*expected, "th-red:turn-9:end"}, timeout=60
            )
        finally:
            if process.returncode is None:
                process.terminate()
                await process.wait()
    keys = [request.key for request in receiver.received]
    acked = [request.key for request in receiver.acknowledged]
    # Nothing lost, nothing but the turn under way sent again, and always under its own key.
    assert acked[:2] == expected[:2]
    assert sorted(set(acked)) == sorted({*expected, "th-red:turn-9:end"})
    assert acked == [*expected, "th-red:turn-9:end"]
    assert keys.count(expected[0]) == 1 and keys.count(expected[1]) == 1
    assert all(request.signature_ok for request in receiver.received)
    await journal.aclose()


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        ([], {}, "no webhook to send to"),
        (["--url", "ftp://example.com/x"], {}, "must start with https://"),
        (["--url", "https://user:pw@example.com/x"], {}, "user name or password"),
        (
            ["--url", "https://example.com/x", "--secret-env", "NOPE_SECRET"],
            {},
            "set the environment variable NOPE_SECRET",
        ),
        (["--url", "https://example.com/x", "--secret-env", "SHORT_SECRET"], {"SHORT_SECRET": "short"}, "at least 16"),
    ],
)
async def test_bad_options_say_what_to_do(tmp_path: Path, args: list[str], env: dict[str, str], says: str) -> None:
    argv = [sys.executable, "-m", "coven_codex", "webhooks", "--journal", str(tmp_path / "j.jsonl"), *args]
    process = await asyncio.create_subprocess_exec(
        *argv, stderr=asyncio.subprocess.PIPE, env={**os.environ, **env}, cwd=str(ROOT)
    )
    _, stderr = await process.communicate()
    assert process.returncode == 2
    assert says in stderr.decode()
    assert "short" not in stderr.decode().replace("SHORT", "")


async def test_a_secret_written_into_coven_toml_is_refused_without_showing_it(tmp_path: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text(
        f'journal = "j.jsonl"\n[[webhooks.targets]]\nurl = "https://example.com/x"\nsecret = "{SECRET}"\n'
    )
    argv = [sys.executable, "-m", "coven_codex", "webhooks", "--config", str(config)]
    process = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE, cwd=str(ROOT))
    _, stderr = await process.communicate()
    assert process.returncode == 2
    assert "a secret is never written in coven.toml" in stderr.decode()
    assert SECRET not in stderr.decode()


async def test_run_with_in_daemon_webhooks_and_no_secret_stops_at_once_saying_so(tmp_path: Path) -> None:
    config = tmp_path / "coven.toml"
    config.write_text('[webhooks]\nin_daemon = true\n[[webhooks.targets]]\nurl = "https://example.com/x"\n')
    (tmp_path / "ws").mkdir()
    argv = [sys.executable, "-m", "coven_codex", "run", "--config", str(config), "--workspace", str(tmp_path / "ws")]
    argv += ["--journal", str(tmp_path / "journal.jsonl"), "--codex-path", "/nonexistent/codex"]
    env = {k: v for k, v in os.environ.items() if k != "COVEN_WEBHOOK_SECRET"}
    process = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE, env=env, cwd=str(ROOT))
    _, stderr = await process.communicate()
    assert process.returncode == 1
    assert "webhook secret" in stderr.decode() and "COVEN_WEBHOOK_SECRET" in stderr.decode()


async def test_a_second_sender_of_the_same_target_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    log = tmp_path / "first.log"
    async with WebhookReceiver(SECRET.encode()) as receiver:
        first = await start_command(path, receiver.url, log)
        try:
            async with asyncio.timeout(60):
                while b"sending the turns of" not in (log.read_bytes() if log.exists() else b""):
                    await asyncio.sleep(0.05)
            second = await start_command(path, receiver.url, tmp_path / "second.log")
            assert await second.wait() == 1
        finally:
            first.terminate()
            assert await first.wait() == 0
    said = (tmp_path / "second.log").read_text()
    assert f"another webhook sender (pid {first.pid})" in said and "twice" in said


@pytest.mark.slow
async def test_repeated_kill_9_at_random_moments_loses_nothing_and_repeats_at_most_one_turn_per_kill(
    tmp_path: Path,
) -> None:
    import random

    rng = random.Random(15)
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path, durability="never")
    ends = [await turn(journal, ("red", "blue", "green")[n % 3], n) for n in range(30)]
    expected = [record.entry.id for record in ends]
    choices: list[Answer] = [200, 200, 200, 500, 503, HANG]
    answers = [rng.choice(choices) for _ in range(400)]
    log = tmp_path / "webhooks.log"
    kills = 6
    async with WebhookReceiver(SECRET.encode(), answers=answers) as receiver:
        for _ in range(kills):
            process = await start_command(path, receiver.url, log)
            wanted = len(receiver.received) + rng.randint(1, 6)
            await receiver.wait_until(lambda r, wanted=wanted: len(r.received) >= wanted, timeout=120)
            await asyncio.sleep(rng.random() * 0.3)
            process.send_signal(signal.SIGKILL)
            await process.wait()
        receiver.answers.clear()
        process = await start_command(path, receiver.url, log)
        try:
            await receiver.wait_until(lambda r: {q.key for q in r.acknowledged} >= set(expected), timeout=300)
        finally:
            process.terminate()
            await process.wait()
    acked = [request.key for request in receiver.acknowledged]
    firsts = list(dict.fromkeys(acked))
    assert firsts == expected
    assert len(acked) - len(firsts) <= kills
    assert all(request.signature_ok for request in receiver.received)
    await journal.aclose()
