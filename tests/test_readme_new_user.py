"""A new user's first hour: the README's "Using it for real" section, run as written, offline.

The commands are taken from the README's text (so the README cannot drift from what works) and
run in a fresh ``git clone`` of this checkout, with ``HOME`` in a scratch folder: ``mkdir``, the
``model-server`` command writing its base config, ``export``, ``validate`` (must pass), ``run``
(must get ready) and the README's small adapter, which must get Codex's reply to a thought.
The clone reuses this checkout's ``.venv`` and ``.codex-cli`` through symlinks, and runs its own
code (``PYTHONPATH`` points at the clone).
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Using it for real"
NEEDS_AN_ACCOUNT = ("coven-codex run ", "coven-codex chat ", "coven-codex validate ")


def readme_blocks() -> list[list[str]]:
    """The code blocks of the section, one command per line (``\\`` continuations joined)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    blocks = re.findall(r"^```\n(.*?)^```", section, re.M | re.S)
    return [[line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()] for block in blocks]


def offline_commands() -> list[str]:
    """The first block's set-up lines (its Codex commands need an account), then every later block."""
    first, *rest = readme_blocks()
    return [line for line in first if not any(cmd in line for cmd in NEEDS_AN_ACCOUNT)] + [
        line for block in rest for line in block
    ]


def read_until(process: subprocess.Popen[bytes], stream_fd: int, pattern: bytes, timeout: float) -> bytes:
    """Raw reads from ``stream_fd`` until ``pattern`` appears; fails with what was read on timeout."""
    said = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stream_fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while pattern not in said:
            left = deadline - time.monotonic()
            assert left > 0 and selector.select(left), f"no {pattern!r} within {timeout:g} s: {said[-2000:]!r}"
            chunk = os.read(stream_fd, 65536)
            assert chunk, f"{process.args!r} exited before {pattern!r}: {said[-2000:]!r}"
            said += chunk
    return said


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    target = tmp_path / "coven-codex"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True, timeout=60)
    for name in (".venv", ".codex-cli"):
        (target / name).symlink_to(ROOT / name)
    return target


@contextlib.contextmanager
def stopped_at_exit(processes: list[subprocess.Popen[bytes]]) -> Iterator[None]:
    try:
        yield
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(processes):
            try:
                process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def test_the_readme_section_has_the_offline_recipe() -> None:
    commands = offline_commands()
    assert any("coven-codex model-server" in line for line in commands)
    assert any(line.startswith("export ") for line in commands)
    assert any("coven-codex run " in line and "--codex-config" in line for line in commands)
    assert "adapter" in commands[-1]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_a_new_user_gets_a_reply_offline_following_the_readme(clone: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_HOME", "VIRTUAL_ENV")
    }
    env.update({"HOME": str(home), "PYTHONPATH": str(clone)})
    processes: list[subprocess.Popen[bytes]] = []
    steps: list[str] = []
    with stopped_at_exit(processes):
        for command in offline_commands():
            if command.startswith("export "):
                name, _, value = command.removeprefix("export ").partition("=")
                env[name] = value
            elif "coven-codex model-server" in command:
                # the README's fixed port, made free: suites running at once on one machine clashed on it
                serving = re.sub(r"--port \d+", f"--port {free_port()}", command)
                server = subprocess.Popen(
                    ["bash", "-c", f"exec {serving}"],
                    cwd=clone,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                processes.append(server)
                assert server.stdout is not None
                read_until(server, server.stdout.fileno(), b"stream_idle_timeout_ms", timeout=30)
            elif "coven-codex run " in command:
                daemon = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=clone, env=env, stderr=subprocess.PIPE)
                processes.append(daemon)
                assert daemon.stderr is not None
                said = read_until(daemon, daemon.stderr.fileno(), b"ready (pid", timeout=90).decode()
                assert "(project-installed CLI)" in said and "no Codex credentials" not in said, said
            elif "adapter" in command:
                adapter = subprocess.Popen(
                    ["bash", "-c", f"exec {command}"], cwd=clone, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
                )
                processes.append(adapter)
                assert adapter.stdin is not None and adapter.stdout is not None
                adapter.stdin.write(b"hello from the README\n")
                adapter.stdin.flush()
                said = read_until(adapter, adapter.stdout.fileno(), b"hello from the README\n", timeout=180)
                assert b"codex [response]> echo: hello from the README" in said, said
                steps.append("replied")
            else:
                done = subprocess.run(
                    ["bash", "-c", command],
                    cwd=clone,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                assert done.returncode == 0, f"{shlex.split(command)[0]} failed: {done.stdout}{done.stderr}"
                steps.append("validated" if "coven-codex validate" in command else "ran")
    assert steps[-2:] == ["validated", "replied"], steps
