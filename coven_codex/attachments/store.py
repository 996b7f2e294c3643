"""Images pasted or uploaded into the page, stored where the daemon can read them.

Files go to a folder beside the journal (``<journal>.attachments/``, mode 0700), named by the
SHA-256 of their content (the same image twice is one file). Only PNG, JPEG, GIF and WebP are
taken, recognised by their first bytes (the browser's Content-Type is not trusted), up to
:data:`MAX_IMAGE_BYTES`.

What the page uploads is *unsent* until a thought attaches it (:class:`UnsentUploads`): a marker
``.unsent/<name>`` beside the image records when. Unsent images are bounded (at most
:data:`MAX_UNSENT_IMAGES` and :data:`MAX_UNSENT_BYTES` per journal's page) and deleted
:data:`UNSENT_MAX_AGE` seconds after their upload unless a thought in the journal attaches them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from coven_codex.entries import Attachment

MAX_IMAGE_BYTES = 10 * 1024 * 1024
STORED_NAME = re.compile(r"^[0-9a-f]{64}\.(png|jpg|gif|webp)$")
MEDIA_TYPES = {"png": "image/png", "jpg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
MAX_UNSENT_IMAGES = 32
"""Images uploaded to the page and not (yet) attached to a thought, at most."""
MAX_UNSENT_BYTES = 100 * 1024 * 1024
"""Their bytes, at most."""
UNSENT_MAX_AGE = 3600.0
"""Seconds after its upload an image no thought attaches is deleted."""
UNSENT = ".unsent"

log = logging.getLogger(__name__)


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
        write_stored(path, data)

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


def write_stored(path: Path, data: bytes) -> None:
    """Write ``data`` to the content-named ``path`` (its folder made 0700), durably and atomically;
    a file already there (the same content) is only touched."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.exists():
        os.utime(path)  # stored again: as new as this upload
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _age(path: Path, now: float) -> float | None:
    try:
        return now - path.stat().st_mtime
    except OSError:
        return None


class UnsentUploads:
    """The page's uploads that no thought has attached yet: their quota, and their cleanup."""

    def __init__(
        self,
        store: ImageStore,
        *,
        max_images: int = MAX_UNSENT_IMAGES,
        max_bytes: int = MAX_UNSENT_BYTES,
        max_age: float = UNSENT_MAX_AGE,
    ) -> None:
        self.store = store
        self.markers = store.folder / UNSENT
        self.max_images = max_images
        self.max_bytes = max_bytes
        self.max_age = max_age
        self._lock = asyncio.Lock()

    async def save(self, data: bytes) -> StoredImage:
        """Store ``data`` as an unsent upload; raises :class:`UploadError` (the quota, or the image)."""
        async with self._lock:  # one upload at a time: the quota is checked and taken together
            name = hashlib.sha256(data).hexdigest()
            count, size = await asyncio.to_thread(self._usage, name)
            if count + 1 > self.max_images or size + len(data) > self.max_bytes:
                raise UploadError(
                    f"{count} images ({size / (1024 * 1024):.1f} MiB) were uploaded to this page and not sent yet; "
                    f"it keeps at most {self.max_images} images or {self.max_bytes // (1024 * 1024)} MiB. "
                    "Send the images you attached with a message, or wait: an image not sent within "
                    f"{self.max_age / 60:.0f} minutes of its upload is deleted",
                    429,
                )
            stored = await self.store.save(data)
            await asyncio.to_thread(self._mark, stored.path.name)
            return stored

    def _usage(self, new_digest: str) -> tuple[int, int]:
        count = size = 0
        for marker in self._marker_paths():
            if marker.name.startswith(new_digest):
                continue  # the same image again: no more room
            try:
                size += (self.store.folder / marker.name).stat().st_size
            except OSError:
                continue  # its image is gone: it holds nothing
            count += 1
        return count, size

    def _marker_paths(self) -> list[Path]:
        try:
            return [path for path in self.markers.iterdir() if STORED_NAME.match(path.name)]
        except OSError:
            return []

    def _mark(self, name: str) -> None:
        self.markers.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.markers / name, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        os.utime(self.markers / name)

    async def sent(self, names: Iterable[str]) -> None:
        """A thought attaching ``names`` was appended: they are not unsent any more."""
        await asyncio.to_thread(self._unmark, [name for name in names if STORED_NAME.match(name)])

    def _unmark(self, names: list[str]) -> None:
        for name in names:
            try:
                (self.markers / name).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cannot remove the marker of the sent image %s: %s", name, exc.strerror)

    async def sweep(self, attached: set[str]) -> int:
        """Delete the unsent images older than ``max_age`` that no thought attaches (``attached``:
        the names every thought of the journal attaches); how many were deleted."""
        return await asyncio.to_thread(self._sweep, frozenset(attached), time.time())

    def _sweep(self, attached: frozenset[str], now: float) -> int:
        deleted = 0
        for marker in self._marker_paths():
            age = _age(marker, now)
            if age is None or age < self.max_age:
                continue
            try:
                if marker.name not in attached:
                    (self.store.folder / marker.name).unlink(missing_ok=True)
                    deleted += 1
                marker.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot delete the unsent image %s: %s", marker.name, exc.strerror)
        if deleted:
            log.info(
                "deleted %d image(s) uploaded to the page more than %.0f minutes ago and never sent",
                deleted,
                self.max_age / 60,
            )
        return deleted
