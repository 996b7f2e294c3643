"""The console chat in a real terminal: tmux runs it, send-keys types, capture-pane reads."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from coven_codex.entries import (
    ApprovalEntry,
    ApprovalRequestEntry,
    BaseEntry,
    DeltaEntry,
    ResponseEntry,
    ThoughtEntry,
    parse_entry_json,
)


class Terminal:
    def __init__(self, socket: Path) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args], check=True, capture_output=True, text=True, timeout=10
        ).stdout

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "chat", "-l", text)
        self.tmux("send-keys", "-t", "chat", "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "chat", "-S", "-200")

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = 10) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.05)
        raise AssertionError(f"terminal never showed {what}; screen was:\n{self.screen()}")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    if shutil.which("tmux") is None:
        raise RuntimeError("tmux is not installed; scripts/setup.sh installs it (apt-get install tmux)")
    term = Terminal(tmp_path / "tmux.sock")
    yield term
    # `kill-server` returns once the server was told, not once it and its panes' processes are gone:
    # wait for those exits (bounded), so no process of this test outlives it.
    found = subprocess.run(
        ["tmux", "-S", str(term.socket), "display-message", "-p", "#{pid}"],
        check=False,
        capture_output=True,
        text=True,
        timeout=10,
    )
    processes: list[psutil.Process] = []
    if found.returncode == 0 and found.stdout.strip().isdigit():
        with contextlib.suppress(psutil.Error):
            server = psutil.Process(int(found.stdout.strip()))
            processes = [server, *server.children(recursive=True)]
    subprocess.run(["tmux", "-S", str(term.socket), "kill-server"], check=False, capture_output=True, timeout=10)
    _gone, alive = psutil.wait_procs(processes, timeout=10)
    for process in alive:  # (a pane's process that ignored its hang-up)
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)


def _append(journal: Path, *entries: BaseEntry) -> None:
    with journal.open("a", encoding="utf-8") as handle:
        for entry in entries:
            handle.write(entry.to_json() + "\n")


def _journal_entries(journal: Path) -> list[BaseEntry]:
    return [parse_entry_json(line) for line in journal.read_text().splitlines()]


def test_console_chat_in_a_real_terminal(terminal: Terminal, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    _append(
        journal,
        ThoughtEntry(id="h1", text="what is 2+2?", sender="ann", conversation="room"),
        ResponseEntry(id="h2", text="It is 4.", conversation="room"),
    )
    command = (
        f"{sys.executable} -m coven_codex chat --journal {journal} --conversation room "
        '--sender ann; echo "[chat exited $?]"; sleep 60'
    )
    terminal.tmux("new-session", "-d", "-s", "chat", "-x", "120", "-y", "40", command)
    terminal.wait_for(lambda s: "[conversation room" in s, "the chat's banner")
    screen = terminal.screen()
    assert "ann> what is 2+2?" in screen and "codex: It is 4." in screen  # history on start

    terminal.type("please list the files")
    terminal.wait_for(lambda s: "ann> please list the files" in s, "the typed line after the prompt")
    deadline = time.monotonic() + 10
    while not any(isinstance(e, ThoughtEntry) and e.text == "please list the files" for e in _journal_entries(journal)):
        assert time.monotonic() < deadline, "the typed thought never reached the journal"
        time.sleep(0.05)

    _append(
        journal,
        DeltaEntry(id="d1", text="Here ", conversation="room"),
        DeltaEntry(id="d2", text="they are", conversation="room"),
    )
    terminal.wait_for(lambda s: "codex: Here they are" in s, "the streamed reply")
    _append(
        journal,
        ResponseEntry(id="r1", text="Here they are: a.txt", conversation="room"),
        ApprovalRequestEntry(id="a1", request_id="req-1", action="run `ls -la`", conversation="room"),
    )
    screen = terminal.wait_for(lambda s: "approval needed [req-1]" in s, "the approval request")
    assert "codex: Here they are: a.txt" in screen
    assert screen.count("Here they are") == 1

    terminal.type("/approve")
    terminal.wait_for(lambda s: "[approve sent for req-1]" in s, "the approval confirmation")
    terminal.type("/quit")
    terminal.wait_for(lambda s: "[chat exited 0]" in s, "the chat to exit with status 0")
    answers = [e for e in _journal_entries(journal) if isinstance(e, ApprovalEntry)]
    assert [(a.request_id, a.decision, a.sender) for a in answers] == [("req-1", "approve", "ann")]


@pytest.mark.slow
def test_the_demo_in_a_real_terminal(terminal: Terminal, tmp_path: Path) -> None:
    """The demo console: a prompt, /help says /quit stops it, a spell call, Ctrl-C without a traceback."""
    command = f'{sys.executable} -m coven_codex demo --dir {tmp_path / "demo"}; echo "[demo exited $?]"; sleep 60'
    terminal.tmux("new-session", "-d", "-s", "chat", "-x", "150", "-y", "50", command)
    terminal.wait_for(lambda s: "/help for commands" in s and s.rstrip().endswith("you>"), "the demo's prompt", 90)
    terminal.type("/help")
    # (The banner already says "/quit to leave": wait for the help's own line.)
    screen = terminal.wait_for(lambda s: "stops the demo's daemon" in s, "the help")
    assert "daemon keeps running" not in screen
    terminal.type("/cancel")
    screen = terminal.wait_for(lambda s: "cancel sent" in s, "the cancel notice")
    terminal.type("what is 2 plus 3?")
    screen = terminal.wait_for(lambda s: "you> what is 2 plus 3?" in s and "← 5" in s, "the spell's result", 120)
    terminal.wait_for(lambda s: s.rstrip().endswith("you>"), "the prompt after the reply", 60)
    terminal.tmux("send-keys", "-t", "chat", "C-c")
    screen = terminal.wait_for(lambda s: "[demo exited" in s, "the demo to stop", 30)
    assert "Traceback" not in screen and "KeyboardInterrupt" not in screen, screen
    assert "[demo exited 130]" in screen
    assert not [line for line in screen.splitlines() if line.startswith("0.169.0 ")], screen
