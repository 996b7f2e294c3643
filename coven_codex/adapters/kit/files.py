"""Files out on the adapters' side: a ``file`` entry (the built-in spell ``send_file``) as an upload.

The kit turns a :class:`~coven_codex.entries.FileEntry` into a :class:`FileUpload` on the
:class:`~coven_codex.adapters.kit.platform.Outgoing` it posts (exactly once, through the ledger,
like every post); a platform that uploads reads its bytes with :func:`read_upload`, which takes only
a regular file inside the journal's attachments folder (the daemon copied it there), within the size
the entry states. A file it refuses, or an upload the platform refuses, becomes one notice.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

from coven_codex.adapters.kit.platform import FileUpload, PlatformError
from coven_codex.entries import FileEntry

MAX_UPLOAD_BYTES = 100 * 1024 * 1024
"""The most an adapter reads of one file, whatever the entry says (the daemon's own limit is lower)."""


def upload_of(entry: FileEntry) -> FileUpload:
    """The upload a ``file`` entry asks for; :class:`PlatformError` when its attachment is no local file."""
    parts = urlsplit(entry.attachment.url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        raise PlatformError(f"the file {entry.attachment.name[:80]!r} is not a local file ({parts.scheme}://)")
    size = getattr(entry.attachment, "size", None)
    return FileUpload(
        path=Path(unquote(parts.path)),
        name=entry.attachment.name or Path(parts.path).name,
        media_type=entry.attachment.media_type,
        size=size if isinstance(size, int) else 0,
    )


def caption_of(entry: FileEntry, upload: FileUpload) -> str:
    """The text posted with the file: the caption, or the file's name."""
    return entry.text or upload.name


def read_upload(upload: FileUpload, folder: Path) -> bytes:
    """The bytes of ``upload``, a regular file inside ``folder`` (the journal's attachments folder);
    raises :class:`PlatformError` (this message) otherwise."""
    shown = repr(upload.name[:80])
    try:
        real = upload.path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise PlatformError(f"the file {shown} is gone from the journal's attachments folder") from None
    if not real.is_relative_to(folder.resolve()):
        raise PlatformError(f"the file {shown} is not in the journal's attachments folder {folder}; it is not sent")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise PlatformError(f"the file {shown} cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_UPLOAD_BYTES:
            raise PlatformError(f"the file {shown} is not a regular file of at most {MAX_UPLOAD_BYTES} bytes")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(MAX_UPLOAD_BYTES + 1)[:MAX_UPLOAD_BYTES]
    except OSError as exc:
        raise PlatformError(f"the file {shown} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
