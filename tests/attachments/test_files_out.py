"""Files out: the built-in spell send_file, its checks, its entry and its copy (docs/journal-protocol.md)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from files_out_helpers import PNG, conversation_journal, file_entries, send

from coven_codex.attachments import FileRefused, locate, read_checked
from coven_codex.attachments.files_out import OUT_FOLDER, sniff_file
from coven_codex.entries import FileEntry, parse_entry_json


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    workspace = tmp_path / "workspace"
    cwd = workspace / "project"
    cwd.mkdir(parents=True)
    return workspace, cwd, tmp_path / "journal.jsonl.attachments"


async def test_send_file_copies_the_file_into_the_attachments_folder_and_writes_one_file_entry(
    places: tuple[Path, Path, Path],
) -> None:
    _workspace, cwd, folder = places
    (cwd / "plot.png").write_bytes(PNG)
    journal = await conversation_journal(cwd)
    result = await send(journal, folder, cwd, "plot.png", "the plot")
    assert not result.isError, result.text()
    [entry] = await file_entries(journal)
    digest = hashlib.sha256(PNG).hexdigest()
    stored = folder / OUT_FOLDER / f"{digest}.png"
    assert stored.read_bytes() == PNG
    assert entry.conversation == "c" and entry.text == "the plot" and entry.sender == "codex"
    assert entry.attachment.url == stored.as_uri() and entry.attachment.media_type == "image/png"
    assert entry.attachment.name == "plot.png" and getattr(entry.attachment, "sha256", None) == digest
    assert entry.thread_id == "thread-1" and entry.turn_id == "turn-1"
    again = parse_entry_json(entry.to_json())
    assert isinstance(again, FileEntry) and again == entry


async def test_the_same_send_file_call_twice_writes_one_entry(places: tuple[Path, Path, Path]) -> None:
    _workspace, cwd, folder = places
    (cwd / "notes.txt").write_text("hello\n")
    journal = await conversation_journal(cwd)
    first = await send(journal, folder, cwd, "notes.txt", "notes")
    second = await send(journal, folder, cwd, "notes.txt", "notes")
    assert not first.isError and not second.isError
    assert first.structuredContent == second.structuredContent
    assert len(await file_entries(journal)) == 1


async def test_send_file_refuses_a_file_larger_than_max_file_bytes(places: tuple[Path, Path, Path]) -> None:
    _workspace, cwd, folder = places
    (cwd / "big.txt").write_text("x" * 2000)
    journal = await conversation_journal(cwd)
    result = await send(journal, folder, cwd, "big.txt", max_bytes=1000)
    assert result.isError and "2000 bytes" in result.text() and "max_file_bytes" in result.text()
    assert await file_entries(journal) == []


async def test_send_file_refuses_a_kind_not_allowed_by_its_content_whatever_its_name(
    places: tuple[Path, Path, Path],
) -> None:
    _workspace, cwd, folder = places
    (cwd / "looks.png").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    journal = await conversation_journal(cwd)
    result = await send(journal, folder, cwd, "looks.png")
    assert result.isError and "not a kind that can be sent" in result.text()
    assert await file_entries(journal) == []


async def test_send_file_refuses_a_directory_and_a_missing_file(places: tuple[Path, Path, Path]) -> None:
    _workspace, cwd, folder = places
    (cwd / "folder").mkdir()
    journal = await conversation_journal(cwd)
    directory = await send(journal, folder, cwd, "folder")
    missing = await send(journal, folder, cwd, "nope.txt")
    assert directory.isError and "is a directory" in directory.text()
    assert missing.isError and "there is no file" in missing.text()


async def test_send_file_from_an_unknown_thread_says_so(places: tuple[Path, Path, Path]) -> None:
    _workspace, cwd, folder = places
    (cwd / "a.txt").write_text("a")
    journal = await conversation_journal(cwd)
    unknown = await send(journal, folder, cwd, "a.txt", thread="other")
    unsaid = await send(journal, folder, cwd, "a.txt", thread=None)
    assert unknown.isError and "no conversation" in unknown.text()
    assert unsaid.isError and "did not say which thread" in unsaid.text()


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (PNG, "png"),
        (b"%PDF-1.7\n", "pdf"),
        (b"PK\x03\x04rest", "zip"),
        (b"\x1f\x8b\x08\x00", "gz"),
        ("héllo\n".encode(), "txt"),
        (b"\xff\xfe\x00\x00bad", None),
        (b"text\x00with nul", None),
    ],
    ids=["png", "pdf", "zip", "gzip", "utf8-text", "not-utf8", "nul-byte"],
)
def test_file_kinds_are_told_by_content(data: bytes, kind: str | None) -> None:
    assert sniff_file(data) == kind


def test_locate_takes_a_path_inside_the_root_and_an_absolute_one_inside_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.txt").write_text("f")
    assert locate("sub/f.txt", tmp_path) == (tmp_path / "sub" / "f.txt").resolve()
    assert locate(str(tmp_path / "sub" / "f.txt"), tmp_path) == (tmp_path / "sub" / "f.txt").resolve()
    with pytest.raises(FileRefused, match="outside the working directory"):
        locate("/etc/hostname", tmp_path)
    file = locate("sub/f.txt", tmp_path)
    assert read_checked(file, tmp_path, max_bytes=10).data == b"f"


async def test_send_file_reads_from_where_the_daemon_s_conversation_works_not_what_the_journal_suggests(
    places: tuple[Path, Path, Path],
) -> None:
    """A conversation moved by ``/project`` (or a take-over) works in a directory no thought names:
    the daemon's conversation says where (the code before read the thoughts' ``cwd`` from the journal
    and sent the workspace's file of that name)."""
    workspace, project, folder = places
    (workspace / "report.txt").write_text("the workspace's\n")
    (project / "report.txt").write_text("the project's\n")
    journal = await conversation_journal(workspace)  # its thoughts name the workspace
    result = await send(journal, folder, project, "report.txt")  # the daemon: it works in the project
    assert not result.isError, result.text()
    [entry] = await file_entries(journal)
    assert Path(entry.attachment.url.removeprefix("file://")).read_text() == "the project's\n"
