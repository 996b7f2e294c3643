"""Named cursors stored next to a file journal, saved atomically and durably."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from coven_codex.journal.atomic import atomic_write, fsync_directory
from coven_codex.journal.protocol import (
    CursorError,
    CursorStorageError,
    Position,
    check_cursor_name,
    check_position,
)


@dataclass(frozen=True, slots=True)
class SavedCursor:
    """A saved position and the fingerprint of the journal file it belongs to (None: unknown)."""

    position: Position
    file: str | None


class FileCursorStore:
    """``<directory>/<escaped name>.json`` holding ``{"name": ..., "position": "P", "file": ...}``.

    Saving writes a temporary file, fsyncs it, renames it over the old one and fsyncs
    the directory (:func:`~coven_codex.journal.atomic.atomic_write`): a crash leaves either
    the old or the new position, never a mix, and a failed save (a full disk) leaves the old
    one and no temporary file.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, name: str) -> Path:
        """The file cursor ``name`` is saved in; raises :class:`CursorError` for an invalid name."""
        return self.directory / f"{quote(check_cursor_name(name), safe='')}.json"

    def load(self, name: str) -> SavedCursor | None:
        """The cursor saved under ``name``, or ``None``; :class:`CursorError` if its file is corrupt."""
        path = self.path_for(name)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CursorStorageError(f"cannot read cursor {name!r} from {path}: {exc.strerror}") from None
        try:
            value = json.loads(raw)
            raw_position = value["position"]
            if isinstance(raw_position, bool) or not isinstance(raw_position, int | str):
                raise TypeError("position")
            # Written as text; an integer is a byte offset saved by an older coven-codex.
            position = Position.parse(str(raw_position))
            file = value.get("file")
            if file is not None and not isinstance(file, str):
                raise TypeError("file")
            return SavedCursor(position, file)
        except (ValueError, TypeError, KeyError, AttributeError, CursorError):
            raise CursorError(
                f'cursor file {path} is corrupt (expected {{"position": "<position>"}});'
                " fix it, or delete it to make this reader start from the beginning"
            ) from None

    def save(self, name: str, position: Position, file: str | None = None) -> None:
        """Save ``position`` (in the journal file whose fingerprint is ``file``) under ``name``."""
        path = self.path_for(name)
        check_position(position)
        payload = json.dumps({"name": name, "position": str(position), "file": file}).encode() + b"\n"
        try:
            if not self.directory.is_dir():
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                fsync_directory(self.directory.parent)
            atomic_write(path, payload)
        except OSError as exc:
            raise CursorStorageError(
                f"cannot save cursor {name!r} in {self.directory}: {exc.strerror};"
                " check that the directory is writable and the disk is not full"
            ) from None
