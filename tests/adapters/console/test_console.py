import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

from coven_codex.adapters.console import ConsoleChat
from coven_codex.adapters.kit.render import RenderMode
from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    CancelEntry,
    DeltaEntry,
    ErrorEntry,
    ResponseEntry,
    StatusEntry,
    ThoughtEntry,
    ToolCallEntry,
    ToolResultEntry,
)
from coven_codex.journal import FileJournal, JournalRecord, MemoryJournal


class Keyboard:
    """Lines typed one by one, each only when the test says so."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()

    async def lines(self) -> AsyncIterator[str]:
        while (line := await self.queue.get()) is not None:
            yield line


async def _wait_for(out: io.StringIO, text: str, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while text not in out.getvalue():
            await asyncio.sleep(0.01)


async def _entries(journal: FileJournal) -> list[object]:
    return [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]


async def test_console_chat_round_trip(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "j.jsonl")
    await journal.append(ThoughtEntry(text="earlier question", sender="ann", conversation="c1"))
    await journal.append(ResponseEntry(text="earlier answer", conversation="c1"))
    await journal.append(ResponseEntry(text="other conversation", conversation="c2"))
    out, keys = io.StringIO(), Keyboard()
    chat = ConsoleChat(journal, "c1", "ann", out)
    task = asyncio.create_task(chat.run(keys.lines()))
    await _wait_for(out, "[conversation c1")
    assert "earlier question" in out.getvalue() and "earlier answer" in out.getvalue()
    assert "other conversation" not in out.getvalue()

    await keys.queue.put("hello codex\n")
    async with asyncio.timeout(5):
        while not any(isinstance(e, ThoughtEntry) and e.text == "hello codex" for e in await _entries(journal)):
            await asyncio.sleep(0.01)

    for chunk in ("Hel", "lo ", "there"):
        await journal.append(DeltaEntry(text=chunk, conversation="c1"))
    await _wait_for(out, "codex: Hello there")
    await journal.append(ResponseEntry(text="Hello there!", conversation="c1"))
    await journal.append(ToolCallEntry(tool="add", arguments={"a": 1}, call_id="k", conversation="c1"))
    await journal.append(ToolResultEntry(text="2", tool="add", call_id="k", conversation="c1"))
    await journal.append(ErrorEntry(text="401 Unauthorized", code="AUTH", hint="codex login", conversation="c1"))
    await journal.append(ApprovalRequestEntry(request_id="r9", action="run rm -rf build", conversation="c1"))
    await _wait_for(out, "approval needed [r9]")
    screen = out.getvalue()
    assert "codex: Hello there!\n" in screen  # the streamed reply is completed, not repeated
    assert screen.count("Hello there") == 1
    assert "→ add(" in screen and "← 2" in screen
    assert "error AUTH: 401 Unauthorized" in screen and "hint: codex login" in screen

    await keys.queue.put("/approve\n")
    await keys.queue.put("/cancel\n")
    await keys.queue.put("/conversation c2\n")
    await _wait_for(out, "other conversation")
    await keys.queue.put("/quit\n")
    await asyncio.wait_for(task, 5)

    entries = await _entries(journal)
    approvals = [e for e in entries if isinstance(e, ApprovalEntry)]
    assert [(a.request_id, a.decision, a.conversation) for a in approvals] == [("r9", "approve", "c1")]
    assert any(isinstance(e, CancelEntry) and e.conversation == "c1" for e in entries)
    await journal.aclose()


async def test_approve_without_a_request_says_so(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "j.jsonl")
    out, keys = io.StringIO(), Keyboard()
    task = asyncio.create_task(ConsoleChat(journal, "c", "bob", out).run(keys.lines()))
    await keys.queue.put("/deny\n")
    await keys.queue.put("/nonsense\n")
    await keys.queue.put(None)
    await asyncio.wait_for(task, 5)
    assert "no approval request is waiting" in out.getvalue()
    assert "unknown command /nonsense" in out.getvalue()
    assert await _entries(journal) == []
    await journal.aclose()


async def test_the_cancel_notice_comes_before_the_daemon_s_answer(tmp_path: Path) -> None:
    """The daemon answers a cancel at once when nothing runs; the console's own notice must come first."""
    journal = FileJournal(tmp_path / "j.jsonl")
    out, keys = io.StringIO(), Keyboard()

    async def daemon() -> None:
        async for item in journal.tail(await journal.end_position()):
            if isinstance(item, JournalRecord) and isinstance(item.entry, CancelEntry):
                await journal.append(StatusEntry(state="cancel_ignored", text="nothing is running", conversation="c"))
                return

    answering = asyncio.create_task(daemon())
    task = asyncio.create_task(ConsoleChat(journal, "c", "ann", out, prompt=True).run(keys.lines()))
    await _wait_for(out, "/help for commands")
    assert out.getvalue().endswith("ann> ")  # the prompt
    await keys.queue.put("/cancel\n")
    await _wait_for(out, "cancel ignored")
    screen = out.getvalue()
    assert screen.index("cancel sent") < screen.index("cancel ignored"), screen
    await keys.queue.put(None)
    await asyncio.wait_for(task, 5)
    await answering
    await journal.aclose()


async def test_a_message_too_long_for_the_journal_is_refused_and_the_chat_goes_on(tmp_path: Path) -> None:
    journal = MemoryJournal(max_line_bytes=400)
    out, keys = io.StringIO(), Keyboard()
    task = asyncio.create_task(ConsoleChat(journal, "c", "ann", out).run(keys.lines()))
    await _wait_for(out, "/help for commands")
    await keys.queue.put("x" * 1000 + "\n")
    await _wait_for(out, "your message was not sent")
    await keys.queue.put("short one\n")
    async with asyncio.timeout(5):
        while not [i for i in await journal.read() if isinstance(i, JournalRecord) and i.entry.text == "short one"]:
            await asyncio.sleep(0.01)
    await keys.queue.put(None)
    await asyncio.wait_for(task, 5)
    assert out.getvalue().count("your message was not sent") == 1


async def test_quiet_rendering_prints_one_card_at_the_turn_s_end_then_the_reply(tmp_path: Path) -> None:
    """A terminal cannot edit: ``--render quiet`` prints the turn's card once, closed, beside the reply."""
    journal = FileJournal(tmp_path / "j.jsonl")
    out, keys = io.StringIO(), Keyboard()
    task = asyncio.create_task(ConsoleChat(journal, "c", "ann", out, render=RenderMode.QUIET).run(keys.lines()))
    await _wait_for(out, "/help for commands")
    start = len(out.getvalue())
    await journal.append(StatusEntry(state="turn_started", conversation="c"))
    for n in range(30):
        arguments = {"command": ["bash", "-lc", f"echo step {n:02}"]}
        await journal.append(ToolCallEntry(tool="exec_command", arguments=arguments, call_id=f"k{n}", conversation="c"))
        await journal.append(
            ToolResultEntry(text=f"step {n:02}", tool="exec_command", call_id=f"k{n}", conversation="c")
        )
    await journal.append(ResponseEntry(text="thirty commands ran.", conversation="c"))
    await journal.append(StatusEntry(state="turn_completed", conversation="c"))
    await _wait_for(out, "done in ")
    await _wait_for(out, "codex: thirty commands ran.")
    await keys.queue.put(None)
    await asyncio.wait_for(task, 5)
    await journal.aclose()
    printed = out.getvalue()[start:]
    assert printed.count("codex: thirty commands ran.") == 1 and printed.count("· 30 steps") == 1
    assert "→ exec_command" not in printed and "[turn started]" not in printed  # no step or status lines
    card = printed[printed.index("done in ") :]
    assert "… 22 earlier steps\n" in card and "✓ $ echo step 29\n" in card
