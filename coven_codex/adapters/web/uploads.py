"""Images pasted or uploaded into the page, stored where the daemon can read them.

Files go to a folder beside the journal (``<journal>.attachments/``, mode 0700), named by the
SHA-256 of their content (the same image twice is one file). Only PNG, JPEG, GIF and WebP are
taken, recognised by their first bytes (the browser's Content-Type is not trusted), up to
:data:`MAX_IMAGE_BYTES`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from coven_codex.entries import Attachment

MAX_IMAGE_BYTES = 10 * 1024 * 1024
STORED_NAME = re.compile(r"^[0-9a-f]{64}\.(png|jpg|gif|webp)$")
MEDIA_TYPES = {"png": "image/png", "jpg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}


class UploadError(ValueError):
    """An upload that is refused; the message says why and what to do, ``status`` the HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def sniff(data: bytes) -> str | None:
    """The file extension of an accepted image type, from its first bytes; None otherwise."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def uploads_dir(journal: Path) -> Path:
    """The folder beside ``journal`` that holds its attachments."""
    return journal.parent.resolve() / f"{journal.name}.attachments"


@dataclass(frozen=True, slots=True)
class StoredImage:
    """An image in the store."""

    path: Path
    media_type: str
    size: int
    sha256: str

    def attachment(self) -> Attachment:
        """The thought's attachment for it: a ``file://`` URL the daemon can read, its type,
        its stored name, and (extra fields) its size and SHA-256."""
        return Attachment.model_validate(
            {
                "url": self.path.as_uri(),
                "media_type": self.media_type,
                "name": self.path.name,
                "size": self.size,
                "sha256": self.sha256,
            }
        )


class ImageStore:
    """Content-addressed image files in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    async def save(self, data: bytes) -> StoredImage:
        """Store ``data`` (an accepted image) and describe it; raises :class:`UploadError`."""
        if not data:
            raise UploadError("the upload is empty; paste or choose an image file")
        if len(data) > MAX_IMAGE_BYTES:
            raise UploadError(
                f"the image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB; send a smaller one", 413
            )
        extension = sniff(data)
        if extension is None:
            raise UploadError("only PNG, JPEG, GIF and WebP images can be attached", 415)
        digest = hashlib.sha256(data).hexdigest()
        path = self.folder / f"{digest}.{extension}"
        await asyncio.to_thread(self._write, path, data)
        return StoredImage(path, MEDIA_TYPES[extension], len(data), digest)

    def _write(self, path: Path, data: bytes) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.exists():
            return
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)

    def find(self, name: str) -> StoredImage | None:
        """The stored image called ``name`` (as :meth:`save` named it), or None."""
        if not STORED_NAME.match(name):
            return None
        path = self.folder / name
        try:
            size = path.stat().st_size
        except OSError:
            return None
        extension = name.rsplit(".", 1)[1]
        return StoredImage(path, MEDIA_TYPES[extension], size, name[:64])
