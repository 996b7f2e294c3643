"""The egress sends an image Codex generated once: a rollout read again from its start (a saved offset
that lagged behind a crash) writes no second ``file`` entry, and lines before the saved offset are not
decoded again. A real rollout file, the real egress, state store and attachments folder, a memory journal."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

from coven_codex.agent.egress import Egress
from coven_codex.agent.replay import ReplayWindow
from coven_codex.agent.saver import StateSaver
from coven_codex.agent.state import SessionState, StateStore
from coven_codex.agent.writer import DaemonWriter
from coven_codex.attachments.files_out import OUT_FOLDER
from coven_codex.attachments.generated import generated_image_entry
from coven_codex.entries import ActivityEntry, BaseEntry, FileEntry
from coven_codex.journal import JournalRecord, MemoryJournal
from coven_codex.rollout import GeneratedImage

THREAD = "01a21f7b-5485-7c93-b5f4-03f035164f49"
TURN = "01a21f7b-54c2-7913-aacd-9329b89ef0c0"
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def _rollout(path: Path) -> int:
    """A rollout with one generated image (the shape Codex 0.169 recorded); its length."""
    lines = [
        {
            "timestamp": "2026-11-28T00:08:26.100Z",
            "type": "event_msg",
            "payload": {"type": "task_started", "turn_id": TURN},
        },
        {
            "timestamp": "2026-11-28T00:08:26.154Z",
            "type": "response_item",
            "payload": {
                "type": "image_generation_call",
                "id": "ig_1",
                "status": "completed",
                "revised_prompt": "a red pixel",
                "result": base64.b64encode(PIXEL).decode(),
            },
        },
    ]
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    path.write_bytes(data)
    return len(data)


async def _run_egress(
    tmp_path: Path, journal: MemoryJournal, writer: DaemonWriter, rollout: Path, *, end: int, offset: int
) -> int:
    """Run an egress over ``rollout`` from a state whose saved offset is ``offset`` until it passed
    ``end``; how many images it decoded."""
    state = SessionState(conversation="c", thread_id=THREAD, egress_offset=offset)
    store = StateStore(tmp_path / "state", durability="never")
    store.prepare()
    saver = StateSaver(state, store)
    decoded = 0

    async def send(image: GeneratedImage) -> BaseEntry:
        nonlocal decoded
        decoded += 1
        return await asyncio.to_thread(generated_image_entry, image, folder=tmp_path / "attachments", max_bytes=1024)

    egress = Egress(
        state=state,
        writer=writer,
        window=ReplayWindow(state, saver, journal),
        on_progress=saver.request,
        send_image=send,
    )
    task = asyncio.create_task(egress.run(rollout, THREAD))
    try:
        async with asyncio.timeout(30):
            await egress.reached(end)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return decoded


async def _entries(journal: MemoryJournal) -> list[BaseEntry]:
    return [item.entry for item in await journal.read() if isinstance(item, JournalRecord)]


async def test_a_generated_image_is_one_file_entry_after_its_activity_and_a_rollout_read_again_adds_none(
    tmp_path: Path,
) -> None:
    rollout = tmp_path / "rollout.jsonl"
    end = _rollout(rollout)
    journal = MemoryJournal()
    writer = DaemonWriter(journal, set())
    assert await _run_egress(tmp_path, journal, writer, rollout, end=end, offset=0) == 1
    first = await _entries(journal)
    assert [e.kind for e in first] == ["status", "activity", "file"]  # turn_started, "generated an image", the image
    assert isinstance(first[1], ActivityEntry) and first[1].text == "generated an image: a red pixel"
    file = first[2]
    assert isinstance(file, FileEntry) and file.turn_id == TURN and file.text == "a red pixel"
    assert [p.read_bytes() for p in (tmp_path / "attachments" / OUT_FOLDER).iterdir()] == [PIXEL]
    # The saved offset lagged (a crash before the save): the line is read and decoded again, and its
    # entries, found by their ids, are not written twice.
    assert await _run_egress(tmp_path, journal, writer, rollout, end=end, offset=0) == 1
    assert await _entries(journal) == first
    # Lines before the saved offset only rebuild the translator's state: the image is not decoded.
    assert await _run_egress(tmp_path, journal, writer, rollout, end=end, offset=end) == 0
    assert await _entries(journal) == first
