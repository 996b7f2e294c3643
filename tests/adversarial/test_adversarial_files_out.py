"""Files out under attack: send_file must never send a file from outside the conversation's working
directory, block on a FIFO, read a huge file, or send a file swapped after its check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from files_out_helpers import conversation_journal, file_entries, send

from coven_codex.attachments import FileRefused, locate, read_checked


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    cwd = tmp_path / "workspace" / "project"
    cwd.mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("the secret\n")
    return cwd


async def test_a_symlink_out_of_the_working_directory_is_refused(cwd: Path) -> None:
    (cwd / "innocent.txt").symlink_to(cwd.parent.parent / "secret.txt")
    journal = await conversation_journal(cwd)
    result = await send(journal, cwd.parent.parent / "store", cwd, "innocent.txt")
    assert result.isError and "outside the working directory" in result.text()
    assert await file_entries(journal) == []


async def test_a_path_with_dot_dot_is_refused_even_when_it_lands_inside(cwd: Path) -> None:
    (cwd / "a.txt").write_text("a")
    journal = await conversation_journal(cwd)
    out = await send(journal, cwd.parent.parent / "store", cwd, "../../secret.txt")
    inside = await send(journal, cwd.parent.parent / "store", cwd, "x/../a.txt")
    assert out.isError and "'..'" in out.text()
    assert inside.isError and "'..'" in inside.text()
    assert await file_entries(journal) == []


async def test_an_absolute_path_elsewhere_and_a_device_are_refused(cwd: Path) -> None:
    journal = await conversation_journal(cwd)
    store = cwd.parent.parent / "store"
    elsewhere = await send(journal, store, cwd, str(cwd.parent.parent / "secret.txt"))
    (cwd / "zero").symlink_to("/dev/zero")
    device = await send(journal, store, cwd, "zero")
    assert elsewhere.isError and "outside the working directory" in elsewhere.text()
    assert device.isError and "outside the working directory" in device.text()
    assert await file_entries(journal) == []


async def test_a_fifo_is_refused_without_blocking(cwd: Path) -> None:
    os.mkfifo(cwd / "pipe")
    journal = await conversation_journal(cwd)
    result = await send(journal, cwd.parent.parent / "store", cwd, "pipe")
    assert result.isError and "not a regular file" in result.text()


async def test_a_huge_sparse_file_is_refused_by_its_size_before_it_is_read(cwd: Path) -> None:
    with open(cwd / "huge.txt", "wb") as handle:
        handle.truncate(50 * 1024**3)  # 50 GiB, sparse: reading it would take minutes
    journal = await conversation_journal(cwd)
    result = await send(journal, cwd.parent.parent / "store", cwd, "huge.txt", max_bytes=10 * 1024 * 1024)
    assert result.isError and str(50 * 1024**3) in result.text()
    assert not (cwd.parent.parent / "store").exists()


def test_a_file_swapped_for_a_symlink_after_its_check_is_refused(cwd: Path) -> None:
    (cwd / "report.txt").write_text("the report")
    located = locate("report.txt", cwd)
    (cwd / "report.txt").unlink()
    (cwd / "report.txt").symlink_to(cwd.parent.parent / "secret.txt")
    with pytest.raises(FileRefused, match="cannot be opened"):
        read_checked(located, cwd, max_bytes=1000)


def test_a_folder_swapped_for_a_symlink_after_the_check_is_refused(cwd: Path) -> None:
    outside = cwd.parent.parent / "outside"
    outside.mkdir()
    (outside / "report.txt").write_text("outside's report")
    (cwd / "out").mkdir()
    (cwd / "out" / "report.txt").write_text("the report")
    located = locate("out/report.txt", cwd)
    (cwd / "out" / "report.txt").unlink()
    (cwd / "out").rmdir()
    (cwd / "out").symlink_to(outside)
    with pytest.raises(FileRefused, match="moved outside the working directory"):
        read_checked(located, cwd, max_bytes=1000)


def test_a_file_that_grows_past_the_limit_after_its_check_sends_no_more_than_the_limit(cwd: Path) -> None:
    (cwd / "log.txt").write_text("small")
    located = locate("log.txt", cwd)
    (cwd / "log.txt").write_text("x" * 5000)
    with pytest.raises(FileRefused, match="5000 bytes"):
        read_checked(located, cwd, max_bytes=1000)
