"""Attacks on a Redis journal's one-daemon rule and on a Redis that lost its data or refuses us: real
daemons (Codex 0.169.0 and the scripted model) on a real redis-server."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies, user_prompts

from coven_codex.journal.opening import open_journal
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer, str], AgentHarness]


def asked(server: ScriptedModelServer) -> list[str]:
    return [user_prompts(r)[-1] for r in server.requests.responses_requests() if user_prompts(r)]


async def test_a_second_daemon_without_cluster_on_one_redis_journal_is_refused_naming_the_holder(
    *,
    codex_bin_169: Path,
    model_server: ScriptedModelServer,
    harness_factory: Factory,
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = redis_server.url(key="adv-second-daemon")
    h = harness_factory(codex_bin_169, model_server, name)
    first = await h.start()
    await h.think("c", "hello")
    await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="first reply")
    other = tmp_path / "other-workspace"
    other.mkdir()
    # another machine: its own state root (XDG_STATE_HOME), state folder and CODEX_HOME; only Redis is shared
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "other-machine-state"))
    second = await h.start("--workspace", str(other))
    assert await asyncio.wait_for(second.process.wait(), 60) == 1
    log = second.log()
    assert (
        f"another coven-codex daemon (pid {first.pid} on {socket.gethostname()}, since" in log
        and f"is serving the journal {name}; two daemons on one journal would answer every thought twice" in log
    ), log[-3000:]
    assert f"kill -TERM {first.pid} on {socket.gethostname()}" in log
    assert "Traceback" not in log
    assert not (other / ".codex" / "config.toml").exists()  # refused before touching anything
    await h.think("c", "still there?")
    await h.wait_for(lambda es: "echo: still there?" in replies(es, "c"), what="reply after the refusal")
    await asyncio.sleep(1.0)  # a second answerer would have been asked by now
    assert asked(model_server).count("hello") == 1
    assert asked(model_server).count("still there?") == 1
    assert replies(await h.entries(), "c") == ["echo: hello", "echo: still there?"]
    assert await h.stop(first) == 0
    # a clean stop gives the journal back at once: the other daemon starts now
    third = await h.start("--workspace", str(other))
    await h.until_logged("ready (pid")
    assert await h.stop(third) == 0


async def test_cluster_daemons_and_a_daemon_without_cluster_refuse_each_other(
    codex_bin_169: Path,
    model_server: ScriptedModelServer,
    harness_factory: Factory,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    name = redis_server.url(key="adv-cluster-mix")
    h = harness_factory(codex_bin_169, model_server, name)
    workspaces = []
    for n in range(2):
        workspaces.append(tmp_path / f"ws-{n}")
        workspaces[-1].mkdir()
    single = await h.start()
    await h.until_logged("ready (pid")
    joining = await h.start("--workspace", str(workspaces[0]), "--cluster", "--lease-time", "2")
    assert await asyncio.wait_for(joining.process.wait(), 60) == 1
    log = joining.log()
    assert f"the journal {name} is served by a coven-codex daemon without --cluster (pid {single.pid} on" in log, log[
        -3000:
    ]
    assert "Traceback" not in log
    assert await h.stop(single) == 0
    member = await h.start("--workspace", str(workspaces[0]), "--cluster", "--lease-time", "2")
    await h.until_logged("ready (pid")
    lone = await h.start("--workspace", str(workspaces[1]))
    assert await asyncio.wait_for(lone.process.wait(), 60) == 1
    log = lone.log()
    assert f"the journal {name} is served by a cluster of 1 daemon(s) started with --cluster" in log, log[-3000:]
    assert "Start this one with --cluster" in log
    await h.think("c", "who answers?")
    await h.wait_for(lambda es: "echo: who answers?" in replies(es, "c"), what="the cluster's reply")
    await asyncio.sleep(1.0)
    assert asked(model_server).count("who answers?") == 1
    assert await h.stop(member) == 0


async def test_a_redis_restarted_without_persistence_stops_the_daemon_with_one_message(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory, tmp_path: Path
) -> None:
    with RedisServer(tmp_path / "redis", appendonly=False) as redis:
        name = redis.url(key="chat")
        h = harness_factory(codex_bin_169, model_server, name)
        daemon = await h.start()
        await h.think("c", "hello")
        await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="first reply")
        redis.stop()
        redis.start()  # empty: no AOF, no snapshot
        assert await asyncio.wait_for(daemon.process.wait(), 90) == 1
        log = daemon.log()
        assert f"the journal's Redis at {name} came back without the journal" in log, log[-4000:]
        assert "Turn Redis persistence on (appendonly yes" in log
        assert "reachable again" not in log
        assert "Traceback" not in log
        # as the message says, a restart serves the new, empty journal (a new handle: the old one is lost too)
        await h.journal.aclose()
        h.journal = open_journal(name)
        again = await h.start()
        await h.until_logged("ready (pid")
        await h.think("c", "after the loss")
        await h.wait_for(lambda es: "echo: after the loss" in replies(es, "c"), what="a reply on the new journal")
        assert await h.stop(again) == 0


def run_command(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SECRET": "0123456789abcdef0123456789abcdef"}
    return subprocess.run(
        [sys.executable, "-m", "coven_codex", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def test_a_wrong_or_missing_password_and_rediss_on_a_plain_server_fail_at_once_saying_what_to_fix(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path / "redis", extra_args=("--requirepass", "right")) as redis:
        plain = f"127.0.0.1:{redis.port}/0?key=chat"
        cases = {
            f"redis://{plain}": "the journal's name has no password",
            f"redis://:wrong@{plain}": "the password in the journal's name is wrong",
            f"rediss://:right@{plain}": "speaks plain Redis, not TLS",
        }
        for name, what in cases.items():
            for argv in (
                ("run", "--workspace", str(tmp_path), "--journal", name),
                ("webhooks", "--journal", name, "--url", "http://127.0.0.1:9/hook", "--secret-env", "SECRET"),
                ("chat", "--journal", name),
            ):
                began = time.monotonic()
                done = run_command(*argv, cwd=tmp_path)
                assert done.returncode in (1, 2), done.stderr
                assert what in done.stderr, (argv, done.stderr)
                assert "cannot be reached" not in done.stderr and "Traceback" not in done.stderr
                assert time.monotonic() - began < 30


async def test_the_webhooks_command_stops_with_one_message_when_redis_comes_back_without_the_journal(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path / "redis", appendonly=False) as redis:
        name = redis.url(key="chat")
        env = {**os.environ, "SECRET": "0123456789abcdef0123456789abcdef"}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "coven_codex",
            "webhooks",
            "--journal",
            name,
            "--url",
            "http://127.0.0.1:9/hook",
            "--secret-env",
            "SECRET",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=str(tmp_path),
        )
        assert process.stdout is not None and process.stderr is not None
        started = await asyncio.wait_for(process.stdout.readline(), 60)
        assert b"coven-codex webhooks: sending the turns of" in started
        redis.stop()
        redis.start()  # empty: no AOF, no snapshot
        try:
            assert await asyncio.wait_for(process.wait(), 60) == 1
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        stderr = (await process.stderr.read()).decode()
        assert f"coven-codex webhooks: the journal's Redis at {name} came back without the journal" in stderr, stderr
        assert "Traceback" not in stderr
