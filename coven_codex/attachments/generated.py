"""Images Codex generates go out to the chat as a ``send_file`` call's file does.

Codex records a generated image in its rollout as a ``response_item`` of type
``image_generation_call`` whose ``result`` is the image, base64 (0.135, 0.147, 0.169 and 0.171,
verified with the scripted model; 0.135 also saves it under ``$CODEX_HOME/generated_images/`` and
writes an ``image_generation_end`` event repeating it). The egress hands each one
(:class:`~coven_codex.rollout.translator.GeneratedImage`) to :func:`generated_image_entry`, which
checks it as :mod:`coven_codex.attachments.files_out` checks a file and stores it the same way
(``<journal>.attachments/out/<sha256>.<ext>``), so the same ``file`` entry reaches every adapter.

The checks, before anything is kept: the base64 text is at most as long as ``max_file_bytes``
bytes encode to (so a huge payload is refused before it is decoded), ASCII, and strict base64
(no other characters); the bytes are a PNG, JPEG, GIF or WebP image by their content. A refused
image becomes one ``error`` entry (:data:`IMAGE_REFUSED_CODE`) saying why and what to do, with the
id the ``file`` entry would have had (so a re-read rollout repeats neither).
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path

from coven_codex.attachments.files_out import FILE_KINDS, OutgoingFile, store_outgoing
from coven_codex.attachments.store import sniff
from coven_codex.entries import ErrorEntry, FileEntry
from coven_codex.rollout import GeneratedImage

IMAGE_REFUSED_CODE = "IMAGE_REFUSED"
IMAGE_REFUSED_HINT = "ask Codex for a smaller image (or raise max_file_bytes); the image is still in Codex's session"
CAPTION_CHARS = 2000
"""A caption is the image's prompt, cut to this many characters (``send_file``'s caption limit)."""
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ImageRefused(ValueError):
    """A generated image that is not sent; the message says why."""


def base64_limit(max_bytes: int) -> int:
    """The longest base64 text (padded) that decodes to at most ``max_bytes`` bytes."""
    return 4 * ((max_bytes + 2) // 3)


def decode_generated(result: str, *, max_bytes: int, name: str) -> OutgoingFile:
    """The checked image of a base64 ``result``, shown as ``name`` plus its extension; raises
    :class:`ImageRefused`."""
    if len(result) > base64_limit(max_bytes):
        raise ImageRefused(
            f"it is about {len(result) * 3 // 4} bytes long; files sent to the chat may be at most "
            f"{max_bytes} bytes (max_file_bytes)"
        )
    if not result.isascii():
        raise ImageRefused("its data is not base64 (it holds characters outside ASCII)")
    try:
        data = base64.b64decode(result, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageRefused(f"its data is not valid base64 ({exc})") from None
    if not data:
        raise ImageRefused("its data is empty")
    extension = sniff(data[:16])
    if extension is None:
        raise ImageRefused("its data is not a PNG, JPEG, GIF or WebP image (by its content)")
    return OutgoingFile(data, f"{name}.{extension}", extension, FILE_KINDS[extension])


def generated_image_entry(image: GeneratedImage, *, folder: Path, max_bytes: int) -> FileEntry | ErrorEntry:
    """The ``file`` entry for ``image``, its copy stored in ``folder`` (the journal's attachments
    folder); or, when it is refused, the one ``error`` entry saying why. Blocking: run it in a thread."""
    name = image.call_id if image.call_id is not None and _NAME.match(image.call_id) else "generated-image"
    try:
        sent = decode_generated(image.result, max_bytes=max_bytes, name=name)
    except ImageRefused as exc:
        return ErrorEntry(
            text=f"Codex generated an image that is not sent to the chat: {exc}",
            code=IMAGE_REFUSED_CODE,
            hint=IMAGE_REFUSED_HINT,
            id=image.entry_id,
            conversation=image.conversation,
            ts=image.ts,
            in_reply_to=image.in_reply_to,
        )
    caption = image.prompt if len(image.prompt) <= CAPTION_CHARS else image.prompt[: CAPTION_CHARS - 1] + "…"
    return FileEntry(
        text=caption,
        attachment=store_outgoing(folder, sent),
        thread_id=image.thread_id,
        turn_id=image.turn_id,
        id=image.entry_id,
        conversation=image.conversation,
        ts=image.ts,
        in_reply_to=image.in_reply_to,
    )
