"""Files out on the console: a message carrying a file is one line with the file's path (the console runs on
the daemon's machine), its name and size, then the caption."""

from __future__ import annotations

import io
from pathlib import Path

from coven_codex.adapters.console.console import ConsolePlatform
from coven_codex.adapters.kit.platform import Address, FileUpload, Outgoing


async def test_a_file_is_a_line_with_its_path_name_size_and_caption(tmp_path: Path) -> None:
    out = io.StringIO()
    console = ConsolePlatform(out, colour=False, prompt=None)
    upload = FileUpload(tmp_path / "abc.pdf", "report.pdf", "application/pdf", 1234)
    await console.post(Address(channel="c"), Outgoing("[file report.pdf]: the report", style="file", file=upload), "k")
    assert out.getvalue() == (
        f"codex sent a file: {tmp_path / 'abc.pdf'} (report.pdf, 1234 bytes): [file report.pdf]: the report\n"
    )
