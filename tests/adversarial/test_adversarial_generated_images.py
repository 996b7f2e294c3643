"""Images Codex generates, under attack: a hostile or huge base64 payload in the rollout is refused
with one clear ``error`` entry (never decoded past the limit, never stored), whatever its content
claims to be; its name cannot steer where it is stored."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import pytest

from coven_codex.attachments.files_out import OUT_FOLDER
from coven_codex.attachments.generated import IMAGE_REFUSED_CODE, generated_image_entry
from coven_codex.entries import ErrorEntry, FileEntry
from coven_codex.rollout import GeneratedImage

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
MAX = 10 * 1024 * 1024


def _image(result: str, call_id: str | None = "ig_1") -> GeneratedImage:
    return GeneratedImage(
        entry_id="thread:7:1",
        conversation="c",
        ts=datetime(2026, 11, 28, tzinfo=UTC),
        in_reply_to="thought-1",
        thread_id="thread",
        turn_id="turn",
        call_id=call_id,
        prompt="",
        result=result,
    )


def _refused(entry: FileEntry | ErrorEntry, store: Path) -> str:
    assert isinstance(entry, ErrorEntry) and entry.code == IMAGE_REFUSED_CODE and entry.hint
    assert entry.id == "thread:7:1" and entry.in_reply_to == "thought-1"  # (where the file entry would be: once)
    assert not (store / OUT_FOLDER).exists()
    return entry.text


def test_a_huge_payload_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    # 48 MiB once decoded, and not base64 at its end: decoding would say so; the size is checked first.
    huge = "A" * (64 * 1024 * 1024) + "$"
    text = _refused(generated_image_entry(_image(huge), folder=tmp_path, max_bytes=MAX), tmp_path)
    assert "at most 10485760 bytes" in text and "max_file_bytes" in text and "base64" not in text


def test_one_byte_over_the_limit_is_refused(tmp_path: Path) -> None:
    data = PIXEL + b"\x00" * 5
    text = _refused(
        generated_image_entry(_image(base64.b64encode(data).decode()), folder=tmp_path, max_bytes=len(PIXEL) - 1),
        tmp_path,
    )
    assert f"at most {len(PIXEL) - 1} bytes" in text


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ("iVBORw0KGgo$$$$", "not valid base64"),
        ("iVBORw0K\nGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ", "not valid base64"),
        ("iVBORw0KGgoé", "outside ASCII"),
        (base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'><script>1</script></svg>").decode(), "not a PNG"),
        (base64.b64encode(b"<html><body>click me</body></html>").decode(), "not a PNG"),
        (base64.b64encode(b"%PDF-1.7\n%%EOF\n").decode(), "not a PNG"),
        (base64.b64encode(b"MZ\x90\x00\x03\x00\x00\x00").decode(), "not a PNG"),
        ("====", "not valid base64"),
    ],
    ids=["bad-characters", "newline", "non-ascii", "svg-script", "html", "pdf", "executable", "padding-only"],
)
def test_a_payload_that_is_not_a_base64_image_is_refused(tmp_path: Path, result: str, why: str) -> None:
    assert why in _refused(generated_image_entry(_image(result), folder=tmp_path, max_bytes=MAX), tmp_path)


@pytest.mark.parametrize("call_id", ["../../../etc/cron.d/x", "ig_1/../../x", "a" * 500, "ig 1", None])
def test_the_call_id_never_steers_the_stored_path_or_the_name(tmp_path: Path, call_id: str | None) -> None:
    image = _image(base64.b64encode(PIXEL).decode(), call_id)
    entry = generated_image_entry(image, folder=tmp_path / "store", max_bytes=MAX)
    assert isinstance(entry, FileEntry) and entry.attachment.name == "generated-image.png"
    [stored] = (tmp_path / "store" / OUT_FOLDER).iterdir()
    assert stored.read_bytes() == PIXEL and entry.attachment.url == stored.as_uri()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
