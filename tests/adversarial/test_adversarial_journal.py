"""Attacks on the file journal and the daemon's durable state: a second daemon on the same
journal, rotation and truncation of the journal, a full disk, power-cut promises."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent_harness import AgentHarness, make_responder, replies, user_prompts

from coven_codex.entries import ThoughtEntry
from coven_codex.journal import START, FileJournal, Position
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.steps import Reply, Stall

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def asked(server: ScriptedModelServer) -> list[str]:
    """The newest prompt of every request the model was sent."""
    return [user_prompts(r)[-1] for r in server.requests.responses_requests() if user_prompts(r)]


async def test_second_daemon_on_the_same_journal_is_refused(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory, tmp_path: Path
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    first = await h.start()
    await h.think("c", "hello")
    await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="first reply")
    other = tmp_path / "other-workspace"
    other.mkdir()
    second = await h.start("--workspace", str(other))  # its own state and CODEX_HOME, the same journal
    assert await asyncio.wait_for(second.process.wait(), 30) == 1
    log = second.log()
    assert f"another coven-codex daemon (pid {first.pid}) is serving the journal {h.journal_path}" in log
    assert "Traceback" not in log
    assert not (other / ".codex" / "config.toml").exists()  # refused before touching anything
    await h.think("c", "still there?")
    await h.wait_for(lambda es: "echo: still there?" in replies(es, "c"), what="reply after the refusal")
    await asyncio.sleep(1.0)  # a second answerer would have been asked by now
    assert asked(model_server).count("hello") == 1
    assert asked(model_server).count("still there?") == 1
    assert replies(await h.entries(), "c") == ["echo: hello", "echo: still there?"]
    assert first.process.returncode is None
    assert await h.stop(first) == 0


def rotate(journal: Path, to: str) -> Path:
    """``mv journal.jsonl <to>; : > journal.jsonl``."""
    rotated = journal.with_name(to)
    journal.rename(rotated)
    journal.write_bytes(b"")
    return rotated


async def test_rotation_while_running_never_redelivers_after_a_restart(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    for text in ("one", "two", "three"):
        await h.think("c", text)
    await h.wait_for(lambda es: "echo: three" in replies(es, "c"), what="the first three replies")
    rotate(h.journal_path, "journal.1")
    for text in ("new A", "new B"):
        await h.think("c", text)
        await h.wait_for(lambda es, t=text: f"echo: {t}" in replies(es, "c"), what=f"reply to {text}")
    assert await h.stop(daemon) == 0
    daemon = await h.start()
    await h.think("c", "after the restart")
    await h.wait_for(lambda es: "echo: after the restart" in replies(es, "c"), what="reply after the restart")
    await asyncio.sleep(1.0)  # a re-delivered thought would have reached the model by now
    prompts = asked(model_server)
    for text in ("one", "two", "three", "new A", "new B", "after the restart"):
        assert prompts.count(text) == 1, (text, prompts)
    assert await h.stop(daemon) == 0


async def test_truncation_while_running_is_followed_without_repeats(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    for text in ("one", "two", "three"):
        await h.think("c", text)
    await h.wait_for(lambda es: "echo: three" in replies(es, "c"), what="the first three replies")
    with h.journal_path.open("r+b") as handle:
        handle.truncate(0)  # logrotate's copytruncate
    await h.think("c", "new A")
    await h.wait_for(lambda es: "echo: new A" in replies(es, "c"), what="reply to new A")
    assert await h.stop(daemon) == 0
    daemon = await h.start()
    await h.think("c", "after the restart")
    await h.wait_for(lambda es: "echo: after the restart" in replies(es, "c"), what="reply after the restart")
    await asyncio.sleep(1.0)
    prompts = asked(model_server)
    for text in ("one", "two", "three", "new A", "after the restart"):
        assert prompts.count(text) == 1, (text, prompts)
    assert await h.stop(daemon) == 0


async def test_rotation_while_stopped_finishes_the_old_file_first(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    await h.think("c", "one")
    await h.wait_for(lambda es: "echo: one" in replies(es, "c"), what="the first reply")
    assert await h.stop(daemon) == 0
    await h.think("c", "written while stopped")  # lands in the file that is rotated next
    rotate(h.journal_path, "journal.jsonl.1")
    await h.think("c", "new A")
    daemon = await h.start()
    await h.wait_for(lambda es: "echo: new A" in replies(es, "c"), what="reply to new A")
    assert "rotated while the daemon was stopped" in daemon.log()
    assert await h.stop(daemon) == 0
    daemon = await h.start()
    await h.think("c", "after the restart")
    await h.wait_for(lambda es: "echo: after the restart" in replies(es, "c"), what="reply after the restart")
    await asyncio.sleep(1.0)
    prompts = asked(model_server)
    for text in ("one", "written while stopped", "new A", "after the restart"):
        assert prompts.count(text) == 1, (text, prompts)
    assert prompts.index("written while stopped") < prompts.index("new A")
    assert await h.stop(daemon) == 0


async def test_a_journal_replaced_by_an_unknown_file_is_refused(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: Factory
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    daemon = await h.start()
    await h.think("c", "one")
    await h.wait_for(lambda es: "echo: one" in replies(es, "c"), what="the first reply")
    assert await h.stop(daemon) == 0
    h.journal_path.unlink()  # the file the cursor belongs to is gone
    await h.think("c", "new A")
    await h.think("c", "new B")
    refused = await h.start()
    assert await asyncio.wait_for(refused.process.wait(), 60) == 1
    log = refused.log()
    assert "belongs to another file than the journal" in log
    assert "agent-ingress.json to read the journal from its beginning" in log
    assert "Traceback" not in log
    assert asked(model_server).count("new A") == 0
    # The fix it names works: without the cursor the new journal is read from its start, once.
    (h.journal_path.with_name("journal.jsonl.cursors") / "agent-ingress.json").unlink()
    daemon = await h.start()
    await h.wait_for(lambda es: "echo: new B" in replies(es, "c"), what="reply to new B")
    await asyncio.sleep(1.0)
    prompts = asked(model_server)
    assert prompts.count("new A") == 1 and prompts.count("new B") == 1 and prompts.count("one") == 1
    assert await h.stop(daemon) == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB filesystem (tmpfs), unmounted afterwards."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory: Path) -> Path:
    """Write a file until the filesystem is full; returns it (remove it to free the space)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    finally:
        os.close(fd)
    return filler


def temporary_files(directory: Path) -> list[str]:
    return [name for _root, _dirs, names in os.walk(directory) for name in names if name.endswith(".tmp")]


async def cursor_passed(journal: FileJournal, position: Position) -> None:
    """Wait until the daemon's saved ingress cursor is past ``position``."""
    async with asyncio.timeout(30):
        while (await journal.load_cursor("agent-ingress") or START) <= position:
            await asyncio.sleep(0.05)


async def pad_to_page(h: AgentHarness) -> Position:
    """Append an entry ingress passes over so the journal ends on a page boundary (no slack
    left in its last page, so the next append needs a new block); returns its start."""
    size = h.journal_path.stat().st_size
    base = len(ThoughtEntry(id="pad", sender="codex", text="", ts="2026-01-01T00:00:00Z").to_json()) + 1
    pad = (4096 - (size + base) % 4096) % 4096
    record = await h.append(ThoughtEntry(id="pad", sender="codex", text="x" * pad, ts="2026-01-01T00:00:00Z"))
    assert record.end.minor % 4096 == 0  # a file journal's position: the byte offset in its segment
    return record.start


@pytest.mark.parametrize("failing", ["journal", "cursor", "state"])
async def test_a_full_disk_stops_the_daemon_with_one_clear_message(
    codex_bin_169: Path, harness_factory: Factory, small_disk: Path, failing: str
) -> None:
    """The disk under the journal, its cursors or the state fills up while a turn runs."""
    responder = make_responder({"fill": lambda r: (Stall(3.0), Reply("filled"))})
    async with ScriptedModelServer(responder=responder) as server:
        h = harness_factory(codex_bin_169, server)
        args: tuple[str, ...] = ()
        if failing == "journal":
            await h.journal.aclose()
            h.journal_path = small_disk / "journal.jsonl"
            h.journal = FileJournal(h.journal_path, durability="never")
        elif failing == "cursor":
            (small_disk / "cursors").mkdir()
            h.journal_path.with_name("journal.jsonl.cursors").symlink_to(small_disk / "cursors")
        else:
            # CODEX_HOME (by default inside the state directory) stays on the big disk: Codex's own
            # writes there are not the daemon's storage.
            args = ("--state-dir", str(small_disk / "state"), "--codex-home", str(h.codex_home))
        daemon = await h.start(*args)
        await h.think("c", "hello")
        await h.wait_for(lambda es: "echo: hello" in replies(es, "c"), what="first reply")
        record = await h.think("c", "fill it")
        await server.requests.wait_for(2)  # the model is thinking (3 s)
        if failing == "journal":
            await cursor_passed(h.journal, await pad_to_page(h))
        if failing == "state":
            # A new conversation's first state save needs a new block; c's turn ends first, so
            # the stop (which interrupts running turns) does not cut its reply off.
            await h.wait_for(lambda es: "filled" in replies(es, "c"), what="c's reply")
        filler = fill(small_disk)
        if failing == "state":
            await h.think("d", "a new conversation")
        assert await asyncio.wait_for(daemon.process.wait(), 60) == 1
        log = daemon.log()
        assert "Traceback" not in log and "ExceptionGroup" not in log
        assert log.count("storage failed, stopping") == 1  # said once, not once per retry
        assert log.count("stopped because its storage failed") == 1
        # The journal's cursors lie on its disk too: whichever of an append and a cursor save meets
        # the full disk first is the one named (under load either comes first).
        what = {
            "cursor": ("cannot save cursor",),
            "journal": ("cannot append to", "cannot save cursor"),
            "state": ("cannot save the state",),
        }
        assert any(f"stopped because its storage failed: {said}" in log for said in what[failing]), log[-2000:]
        assert "No space left on device" in log and "Free space on that filesystem" in log
        assert temporary_files(small_disk) == []
        # Free the space: the daemon resumes where it stopped, answering and writing everything once.
        filler.unlink()
        daemon = await h.start(*args)
        if failing == "state":
            await h.wait_for(lambda es: "echo: a new conversation" in replies(es, "d"), what="d's reply")
        await h.think("c", "after")
        await h.wait_for(lambda es: "echo: after" in replies(es, "c"), what="a later reply")
        entries = await h.entries()
        # "fill it" reached Codex once. The stop interrupts its turn when the disk fills before the
        # model's answer (which it does or not, depending on timing): then its turn ends aborted
        # and it has no reply; otherwise the reply is there. Never twice. (A turn cut off by a
        # stopping daemon gets no end status if Codex had not recorded one: docs/architecture.md.)
        assert replies(entries, "c") in (["echo: hello", "filled", "echo: after"], ["echo: hello", "echo: after"])
        assert asked(server).count("fill it") == 1
        assert asked(server).count("a new conversation") == (1 if failing == "state" else 0)
        assert record.start < (await h.journal.load_cursor("agent-ingress") or START)
        assert await h.stop(daemon) == 0
