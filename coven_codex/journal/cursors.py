"""Named cursors stored next to a file journal, saved atomically and durably."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from urllib.parse import quote

from coven_codex.journal.protocol import CursorError, Position, check_cursor_name, check_position


def fsync_directory(directory: Path) -> None:
    """Make a rename or a creation inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileCursorStore:
    """``<directory>/<escaped name>.json`` holding ``{"position": N}``.

    Saving writes a temporary file, fsyncs it, renames it over the old one and fsyncs
    the directory: a crash leaves either the old or the new position, never a mix.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, name: str) -> Path:
        return self.directory / f"{quote(check_cursor_name(name), safe='')}.json"

    def load(self, name: str) -> Position | None:
        path = self.path_for(name)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CursorError(f"cannot read cursor {name!r} from {path}: {exc.strerror}") from None
        try:
            value = json.loads(raw)
            position = value["position"]
            return check_position(position)
        except (ValueError, TypeError, KeyError, CursorError):
            raise CursorError(
                f"cursor file {path} is corrupt (expected {{\"position\": <integer >= 0>}});"
                " fix it, or delete it to make this reader start from the beginning"
            ) from None

    def save(self, name: str, position: Position) -> None:
        path = self.path_for(name)
        check_position(position)
        payload = json.dumps({"name": name, "position": position}).encode() + b"\n"
        try:
            if not self.directory.is_dir():
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                fsync_directory(self.directory.parent)
            temporary = self.directory / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.replace(temporary, path)
            except OSError:
                temporary.unlink(missing_ok=True)
                raise
            fsync_directory(self.directory)
        except OSError as exc:
            raise CursorError(
                f"cannot save cursor {name!r} in {self.directory}: {exc.strerror};"
                " check that the directory is writable and the disk is not full"
            ) from None
