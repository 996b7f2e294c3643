"""Images Codex generates: the translator hands on the base64 image of an ``image_generation_call``
(only when asked, never from a fork's inherited history), and :func:`generated_image_entry` stores it
as ``send_file`` stores a file and gives the ``file`` entry every adapter uploads."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from coven_codex.attachments.files_out import OUT_FOLDER
from coven_codex.attachments.generated import base64_limit, generated_image_entry
from coven_codex.entries import ActivityEntry, FileEntry
from coven_codex.rollout import GeneratedImage, RolloutTranslator

THREAD = "01a21f7b-5485-7c93-b5f4-03f035164f49"
TURN = "01a21f7b-54c2-7913-aacd-9329b89ef0c0"
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def _line(record_type: str, payload: dict[str, object]) -> bytes:
    """A rollout line as Codex 0.169 writes it."""
    return json.dumps({"timestamp": "2026-11-28T00:08:26.154Z", "ordinal": 9, "type": record_type, "payload": payload})


def _image_line(result: str = base64.b64encode(PIXEL).decode()) -> bytes:
    # The shape Codex 0.169 and 0.171 wrote for the scripted model's image_generation_call (recorded).
    item = {
        "type": "image_generation_call",
        "id": "ig_probe1",
        "status": "completed",
        "revised_prompt": "a red pixel",
        "result": result,
        "internal_chat_message_metadata_passthrough": {"turn_id": TURN},
    }
    return _line("response_item", item).encode()


def _feed(translator: RolloutTranslator, *lines: bytes) -> list[object]:
    entries: list[object] = []
    offset = 0
    for line in lines:
        entries += translator.feed_bytes(line, offset)
        offset += len(line) + 1
    return entries


def _image(result: str, *, call_id: str | None = "ig_probe1", prompt: str = "a red pixel") -> GeneratedImage:
    return GeneratedImage(
        entry_id=f"{THREAD}:0:1",
        conversation="c",
        ts=datetime(2026, 11, 28, tzinfo=UTC),
        in_reply_to="thought-1",
        thread_id=THREAD,
        turn_id=TURN,
        call_id=call_id,
        prompt=prompt,
        result=result,
    )


def test_the_translator_hands_on_a_generated_image_with_the_id_after_its_activity() -> None:
    translator = RolloutTranslator("c", THREAD, keep_images=True)
    started = _line("event_msg", {"type": "task_started", "turn_id": TURN}).encode()
    entries = _feed(translator, started, _image_line())
    [activity] = [e for e in entries if isinstance(e, ActivityEntry)]
    [image] = translator.take_images()
    assert activity.id is not None and image.entry_id == activity.id.removesuffix(":0") + ":1"
    assert (image.turn_id, image.call_id, image.prompt) == (TURN, "ig_probe1", "a red pixel")
    assert base64.b64decode(image.result) == PIXEL
    assert translator.take_images() == []  # taken once


def test_a_translator_not_asked_for_images_keeps_none() -> None:
    translator = RolloutTranslator("c", THREAD)
    assert [type(e) for e in _feed(translator, _image_line())] == [ActivityEntry]
    assert translator.take_images() == []


def test_an_image_call_without_a_result_gives_only_its_activity() -> None:
    translator = RolloutTranslator("c", THREAD, keep_images=True)
    assert [type(e) for e in _feed(translator, _image_line(result=""))] == [ActivityEntry]
    assert translator.take_images() == []


def test_a_generated_image_is_stored_as_a_sent_file_and_becomes_its_file_entry(tmp_path: Path) -> None:
    entry = generated_image_entry(_image(base64.b64encode(PIXEL).decode()), folder=tmp_path, max_bytes=1024)
    assert isinstance(entry, FileEntry)
    digest = hashlib.sha256(PIXEL).hexdigest()
    stored = tmp_path / OUT_FOLDER / f"{digest}.png"
    assert stored.read_bytes() == PIXEL
    assert entry.attachment.url == stored.as_uri()
    assert (entry.attachment.media_type, entry.attachment.name) == ("image/png", "ig_probe1.png")
    assert entry.text == "a red pixel"
    attachment = entry.model_dump()["attachment"]
    assert (attachment["sha256"], attachment["size"]) == (digest, len(PIXEL))
    assert (entry.id, entry.in_reply_to, entry.thread_id, entry.turn_id) == (f"{THREAD}:0:1", "thought-1", THREAD, TURN)


def test_an_image_exactly_at_the_limit_is_sent(tmp_path: Path) -> None:
    entry = generated_image_entry(_image(base64.b64encode(PIXEL).decode()), folder=tmp_path, max_bytes=len(PIXEL))
    assert isinstance(entry, FileEntry)
    assert base64_limit(len(PIXEL)) >= len(base64.b64encode(PIXEL))


def test_a_long_prompt_is_cut_to_a_caption(tmp_path: Path) -> None:
    image = _image(base64.b64encode(PIXEL).decode(), prompt="p" * 5000)
    entry = generated_image_entry(image, folder=tmp_path, max_bytes=1024)
    assert isinstance(entry, FileEntry) and len(entry.text) == 2000 and entry.text.endswith("…")


def test_codex_0_135_s_image_generation_end_beside_the_item_gives_one_image() -> None:
    """0.135 writes an ``image_generation_end`` event (with the same base64 and a ``saved_path``) just
    before the item (recorded with the scripted model): one activity, one image."""
    end = {
        "type": "image_generation_end",
        "call_id": "ig_probe1",
        "status": "completed",
        "revised_prompt": "a red pixel",
        "result": base64.b64encode(PIXEL).decode(),
        "saved_path": "/codex-home/generated_images/thread/ig_probe1.png",
    }
    translator = RolloutTranslator("c", THREAD, keep_images=True)
    entries = _feed(translator, _line("event_msg", end).encode(), _image_line())
    assert [type(e) for e in entries] == [ActivityEntry]
    [image] = translator.take_images()
    assert base64.b64decode(image.result) == PIXEL


def test_a_fork_hands_on_no_image_of_the_parent_s_history_it_embeds() -> None:
    """A fork (``forked_from_id``) embeds its parent's turns, shown from the parent's own rollout: an
    image of those is not sent again; one of the fork's own turns is."""
    translator = RolloutTranslator("c", THREAD, keep_images=True)
    meta = _line("session_meta", {"id": THREAD, "forked_from_id": "01a21f70-0000-7000-8000-000000000000"})
    parent_turn = _line("event_msg", {"type": "task_started", "turn_id": "01a21f7a-0000-7000-8000-000000000000"})
    assert _feed(translator, meta.encode(), parent_turn.encode(), _image_line()) == []
    assert translator.take_images() == []
    own_turn = _line("event_msg", {"type": "task_started", "turn_id": TURN})
    _feed(translator, own_turn.encode(), _image_line())
    assert [image.turn_id for image in translator.take_images()] == [TURN]
