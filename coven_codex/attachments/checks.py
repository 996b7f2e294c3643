"""Images a thought attaches (``thought.attachments``): checked, then handed to Codex as image input.

An attachment is accepted when it is

- a ``file://`` URL of a regular file inside the journal's attachments folder
  (``<journal>.attachments/``, :func:`~coven_codex.attachments.store.uploads_dir`, where
  adapters store what users paste; symbolic links are
  resolved first). Files anywhere else are refused: Codex (and every command it runs) can write
  in the workspace and elsewhere, so a path outside that folder could name a file Codex planted,
  or any image on the machine, and the daemon would send it to the model provider. Only files an
  adapter deliberately stored for the chat leave the machine;
- readable, at most ``max_attachment_bytes`` long, and an image by its first bytes (PNG, JPEG,
  GIF or WebP; the ``media_type`` an adapter wrote is not trusted);
- or an ``https://`` URL, where the driver can pass one on (the app-server's ``image`` input;
  ``codex exec`` takes only files).

A thought with an attachment that is not accepted is refused as a whole, with one ``error``
entry saying which attachment and why (docs/journal-protocol.md, Images).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from coven_codex.attachments.store import sniff, uploads_dir
from coven_codex.codex.drivers import ImageInput
from coven_codex.entries import Attachment

__all__ = ["AttachmentRefused", "check_images", "uploads_dir"]

MAX_URL_CHARS = 2048


class AttachmentRefused(ValueError):
    """An attachment the daemon will not hand to Codex; the message says which and why."""


def check_images(
    attachments: Sequence[Attachment], *, folder: Path | None, max_bytes: int, urls: bool
) -> tuple[ImageInput, ...]:
    """The image inputs for ``attachments``; raises :class:`AttachmentRefused` for the first bad one.

    ``folder`` is the journal's attachments folder (``None``: the journal is not a file, so no
    file is accepted); ``urls`` says whether the driver takes ``https://`` images.
    """
    images: list[ImageInput] = []
    for number, attachment in enumerate(attachments, 1):
        shown = _shown(attachment, number)
        url = attachment.url
        scheme = urlsplit(url).scheme.lower()
        if scheme == "https":
            if not urls:
                raise AttachmentRefused(
                    f"{shown} is an https:// address, and `codex exec` takes only image files; "
                    "the adapter must store the image in the journal's attachments folder"
                )
            if len(url) > MAX_URL_CHARS:
                raise AttachmentRefused(f"{shown} has an address longer than {MAX_URL_CHARS} characters")
            images.append(ImageInput(url=url))
        elif scheme == "file":
            images.append(ImageInput(path=_check_file(url, shown, folder=folder, max_bytes=max_bytes)))
        else:
            raise AttachmentRefused(f"{shown} is neither a file:// nor an https:// address")
    return tuple(images)


def _shown(attachment: Attachment, number: int) -> str:
    name = attachment.name or attachment.url.rsplit("/", 1)[-1]
    return f"attachment {number} ({name[:80]!r})"


def _check_file(url: str, shown: str, *, folder: Path | None, max_bytes: int) -> Path:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise AttachmentRefused(f"{shown} names a file on another host ({parts.netloc[:80]})")
    path = Path(unquote(parts.path))
    if not path.is_absolute():
        raise AttachmentRefused(f"{shown} is not an absolute file path")
    if folder is None:
        raise AttachmentRefused(f"{shown} is a file, and this journal has no attachments folder")
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise AttachmentRefused(f"{shown} does not exist (or cannot be reached)") from None
    if not real.is_relative_to(folder.resolve()):
        raise AttachmentRefused(f"{shown} is outside the journal's attachments folder {folder}")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # (a FIFO must not block the session)
    except OSError as exc:
        raise AttachmentRefused(f"{shown} cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AttachmentRefused(f"{shown} is not a regular file")
        if info.st_size > max_bytes:
            raise AttachmentRefused(
                f"{shown} is {info.st_size} bytes long; the limit (max_attachment_bytes) is {max_bytes}"
            )
        head = os.read(fd, 16)
    except OSError as exc:
        raise AttachmentRefused(f"{shown} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if sniff(head) is None:
        raise AttachmentRefused(f"{shown} is not a PNG, JPEG, GIF or WebP image")
    return real
