"""Restart on a long journal: the daemon's start-up to the first reply, and its peak memory.

Run: ``.venv/bin/python benchmarks/bench_restart.py [--sizes 10 100 1000] [--baseline-max 1000]
[--backlog 1000000] [--backlog-baseline-max 1000000]``

Two cases: *read*, traffic a daemon that ran meanwhile had read (below), and *backlog*, traffic
written while the daemon was stopped (at the end).

For each journal size (MB) the daemon (``python -m coven_codex run``, a process of its own, on
Codex 0.169.0 and the scripted model server, echo, in this process):

1. answers one thought of the conversation ``idle`` and is stopped (SIGTERM): that conversation
   has a thread, a rollout and a saved state, and stays idle from then on;
2. the journal then grows by the size's worth of other traffic (generated: thoughts of 1,000
   other conversations and the daemon's replies to them, ids as the daemon makes them, about
   240 bytes an entry), and the ingress cursor is saved at its end, as a daemon that ran
   meanwhile would have left it (the daemon is stopped while the traffic is written, only to
   write it fast; the conversations of the traffic have no state, so what is measured is the
   journal's length, not the number of conversations), and flushed to disk (``sync``) as a
   journal written over months would be;
3. the daemon starts again and a thought of a new conversation is appended at once; measured:
   *running*, from starting the daemon to its log saying it runs (Python's start, recovery);
   *first reply*, from starting the daemon to that thought's ``response`` entry in the journal
   (that, plus the shared Codex app-server started, a thread, a turn); and *peak RSS*, the
   daemon's own high-water mark (``VmHWM``, Codex not included) once the reply is there.

The daemon runs from compiled bytecode, as an installed package does (pip compiles it; the
first start writes what is missing): ``PYTHONDONTWRITEBYTECODE`` is dropped from its
environment, so step 1's start caches it and step 3's uses it. ``--compile-each-start`` keeps the
variable: where no bytecode was cached before (the baseline's fresh export; a checkout never run
without it), every start compiles the whole package again, ≈ 0.15 to 0.2 s more CPU.
Each size also prints where the restart's time went, from the restarted daemon's log
(its timestamps, against the moment it was started): ``starting`` (Python's start, imports,
settings, the ``validate`` folder checks), Codex found and its version read, the shared
app-server started (its home prepared, then the process and ``initialize``, overlapping
recovery), ``daemon running`` (recovery done), and the reply; and the CPU time the daemon had used by
the reply (user + system, Codex not included), which the machine's load hardly changes.

*Backlog* (issue 26, item 9): the same steps, but in step 2 the journal grows by ``--backlog``
entries that other programs wrote while the daemon was stopped (chat messages of a bridge's
1,000 channels and another bot's replies to them: nothing for Codex, nothing of the daemon's,
about 235 bytes an entry; 1,000,000 make 235 MB), and the ingress cursor stays where the daemon
left it, before all of them: the restarted daemon must read the whole backlog before the new
thought. Its baseline is :data:`BACKLOG_BASELINE_REV` (``--backlog-baseline-rev``), which decoded
the backlog whole in recovery, kept it in memory, and read it again in ingress.

Baselines are exported by ``_common.export_baseline``, which also installs, beside the export,
what the revision declares and this environment no longer has (``jsonrpcserver`` for these):
every baseline runs from a fresh clone.

The baseline of *read* is the recovery before issue 18: the same measurement with the code of
``--baseline-rev`` (default :data:`BASELINE_REV`), exported with ``git archive`` into a temporary
folder and put first on ``PYTHONPATH``, for the sizes up to ``--baseline-max`` MB (it keeps every
daemon entry id of the journal in memory, about 7 GB at 1 GB). Targets (issue 18): first reply
<= 2 s and peak RSS <= 100 MB at every size, in both cases (issue 26 set the same for the
backlog); exit 1 if one is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tomlkit
from _common import CURRENT, CodeTree, export_baseline, machine_line, print_table

from coven_codex.agent.ingress import CURSOR_NAME
from coven_codex.entries import GenericEntry, ResponseEntry, ThoughtEntry
from coven_codex.journal import FileJournal, JournalRecord, Position
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.responders import echo_responder

ROOT = Path(__file__).resolve().parent.parent
CODEX = ROOT / ".codex-cli" / "0.169.0" / "node_modules" / ".bin" / "codex"
BASELINE_REV = "0c3251e"
"""main before issue 18's recovery (start-up read the journal from the oldest saved position)."""
BACKLOG_BASELINE_REV = "24169e3"
"""main before issue 26 item 9 (start-up decoded a backlog whole, kept it, and ingress read it again)."""
BACKLOG_ENTRIES = 1_000_000
REPLY_TIMEOUT = 900.0
TARGET_SECONDS = 2.0
TARGET_RSS_MB = 100.0
TRAFFIC_CONVERSATIONS = 1000
BLOCK = 4096
"""Traffic entries generated at once."""


Case = Literal["read", "backlog"]
"""``read``: the traffic was read by a daemon that ran meanwhile; ``backlog``: written while it was stopped."""


@dataclass(frozen=True, slots=True)
class Result:
    design: str
    size: int
    """MB of traffic (``read``), entries (``backlog``)."""
    journal_mb: float
    running: float
    """From starting the daemon to its log saying it runs (recovery done, serving)."""
    first_reply: float
    peak_rss_mb: float


PHASES: tuple[tuple[str, bytes], ...] = (
    ("imported", b"starting (pid"),
    ("codex found", b"started as the"),
    ("app-server", b"started a shared Codex app-server"),
    ("running", b"daemon running"),
)
"""The restarted daemon's log lines reported for each size (the first line holding each marker)."""


def daemon_env(tmp: Path, code: CodeTree, *, compile_each_start: bool = False) -> dict[str, str]:
    """The daemon's environment: its code first on the path, an empty HOME, state under ``tmp``,
    bytecode cached unless ``compile_each_start`` (module docstring)."""
    dropped = {"CODEX_HOME", "OPENAI_API_KEY"} | (set() if compile_each_start else {"PYTHONDONTWRITEBYTECODE"})
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env.update(
        {
            DEFAULT_ENV_KEY: "bench",
            "XDG_STATE_HOME": str(tmp / "state"),
            "HOME": str(home),
            "PYTHONPATH": code.pythonpath,
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def start_daemon(
    tmp: Path, code: CodeTree, journal_path: Path, base: Path, log_path: Path, *, compile_each_start: bool = False
) -> subprocess.Popen[bytes]:
    """``python -m coven_codex run`` with ``code``, its output into ``log_path``."""
    workspace = tmp / "ws"
    workspace.mkdir(exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "coven_codex",
        "run",
        "--workspace",
        str(workspace),
        "--journal",
        str(journal_path),
        "--codex-config",
        str(base),
        "--codex-path",
        str(CODEX),
    ]
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=daemon_env(tmp, code, compile_each_start=compile_each_start),
            cwd=code.source,
        )


def stop_daemon(daemon: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within a minute."""
    daemon.terminate()
    try:
        daemon.wait(60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) the process has used so far, in seconds: unlike its wall
    times, hardly changed by other processes' load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """The process's resident high-water mark (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


async def wait_reply(
    journal: FileJournal, conversation: str, start: Position, daemon: subprocess.Popen[bytes], log_path: Path
) -> float:
    """When ``conversation``'s first ``response`` appeared after ``start`` (polled every 20 ms)."""
    position = start
    deadline = time.monotonic() + REPLY_TIMEOUT
    while True:
        items = await journal.read(position)
        now = time.perf_counter()
        for item in items:
            position = item.end
            entry = item.entry if isinstance(item, JournalRecord) else None
            if entry is not None and entry.kind == "response" and entry.conversation == conversation:
                return now
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no reply in {conversation!r}:\n{log_path.read_text()[-3000:]}")
        await asyncio.sleep(0.02)


async def wait_ready(log_path: Path, daemon: subprocess.Popen[bytes]) -> float:
    """When the daemon logged that it runs (polled every 20 ms)."""
    deadline = time.monotonic() + REPLY_TIMEOUT
    while b"daemon running" not in log_path.read_bytes():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not start:\n{log_path.read_text()[-2000:]}")
        await asyncio.sleep(0.02)
    return time.perf_counter()


def phases(log_path: Path, started: float) -> str:
    """Seconds from ``started`` (wall clock) to each of :data:`PHASES` in the daemon's log."""
    lines = log_path.read_bytes().splitlines()
    shown = []
    for name, marker in PHASES:
        line = next((line for line in lines if marker in line), None)
        if line is None:
            shown.append(f"{name} -")
            continue
        stamp = datetime.datetime.strptime(line[:23].decode(), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        shown.append(f"{name} {stamp - started:.2f}")
    return ", ".join(shown)


def legacy_cursor(journal_path: Path, end: Position) -> None:
    """Rewrite the saved ingress cursor as the baseline reads it: ``"position"`` a byte offset
    (an integer; positions became ``"MAJOR-MINOR"`` text with journal segments, after it)."""
    path = journal_path.with_name(journal_path.name + ".cursors") / f"{CURSOR_NAME}.json"
    saved = json.loads(path.read_bytes())
    assert end.major == 0, "the benchmark's journal is one segment"
    path.write_text(json.dumps({**saved, "position": end.minor}) + "\n")


def write_traffic(journal_path: Path, megabytes: int) -> None:
    """Append ``megabytes`` MB of thoughts and replies of other conversations (module docstring)."""
    thought = ThoughtEntry(id="T" * 12, conversation="C" * 12, sender="web", text="W" * 60).to_json().encode()
    reply = (
        ResponseEntry(id="R" * 52, conversation="C" * 12, text="echo: " + "W" * 60, in_reply_to="T" * 12)
        .to_json()
        .encode()
    )
    target = megabytes * 1_000_000
    written = 0
    index = 0
    with journal_path.open("ab") as out:
        while written < target:
            lines = []
            for n in range(index, index + BLOCK):
                conversation = b"c-%010d" % (n % TRAFFIC_CONVERSATIONS)
                thought_id = b"t-%010d" % n
                text = b"message %052d" % n
                lines.append(
                    thought.replace(b"T" * 12, thought_id).replace(b"C" * 12, conversation).replace(b"W" * 60, text)
                )
                reply_id = b"%036d:%07d:0" % (n % TRAFFIC_CONVERSATIONS, n)
                lines.append(
                    reply.replace(b"R" * 52, reply_id)
                    .replace(b"T" * 12, thought_id)
                    .replace(b"C" * 12, conversation)
                    .replace(b"W" * 60, text)
                )
            index += BLOCK
            data = b"\n".join(lines) + b"\n"
            out.write(data)
            written += len(data)


def write_backlog(journal_path: Path, entries: int) -> None:
    """Append ``entries`` entries of other programs' traffic (module docstring, *Backlog*): chat
    messages of a bridge's channels and another bot's replies to them, nothing for Codex and
    nothing of the daemon's, about 235 bytes an entry."""
    message = (
        GenericEntry(id="M" * 12, kind="message", conversation="C" * 12, sender="slack:U0123", text="W" * 68)
        .to_json()
        .encode()
    )
    answer = (
        ResponseEntry(id="A" * 12, conversation="C" * 12, sender="helper-bot", text="W" * 67, in_reply_to="M" * 12)
        .to_json()
        .encode()
    )
    with journal_path.open("ab") as out:
        for first in range(0, entries, BLOCK):
            lines = []
            for n in range(first, min(first + BLOCK, entries)):
                conversation = b"c-%010d" % (n % TRAFFIC_CONVERSATIONS)
                if n % 2 == 0:
                    line = message.replace(b"M" * 12, b"m-%010d" % n).replace(b"W" * 68, b"message %060d" % n)
                else:
                    line = (
                        answer.replace(b"A" * 12, b"a-%010d" % n)
                        .replace(b"M" * 12, b"m-%010d" % (n - 1))
                        .replace(b"W" * 67, b"answer %060d" % n)
                    )
                lines.append(line.replace(b"C" * 12, conversation))
            out.write(b"\n".join(lines) + b"\n")


async def measure(
    case: Case,
    design: str,
    size: int,
    code: CodeTree,
    *,
    server: ScriptedModelServer,
    scratch: Path,
    compile_each_start: bool = False,
) -> Result:
    """One size of ``case`` with ``code`` (module docstring)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-restart-{case}-{design}-{size}-", dir=scratch))
    try:
        journal_path = tmp / "journal.jsonl"
        base = tmp / "base.toml"
        base.write_text(tomlkit.dumps(codex_config(server.base_url)))
        log_path = tmp / "daemon.log"
        journal = FileJournal(journal_path, durability="never")
        try:
            daemon = start_daemon(tmp, code, journal_path, base, log_path, compile_each_start=compile_each_start)
            try:
                record = await journal.append(ThoughtEntry(conversation="idle", text="hello"))
                await wait_reply(journal, "idle", record.start, daemon, log_path)
            finally:
                stop_daemon(daemon)
            if case == "backlog":
                await asyncio.to_thread(write_backlog, journal_path, size)
            else:
                await asyncio.to_thread(write_traffic, journal_path, size)
            # On disk before the restart, as a journal written over months is: else the kernel
            # writes the traffic back while the daemon starts, and its start measures the disk.
            await asyncio.to_thread(os.sync)
            end = await journal.end_position()
            if case == "read":  # (a backlog was written while the daemon was stopped: its cursor stays before it)
                await journal.save_cursor(CURSOR_NAME, end)
                if design == "old":
                    legacy_cursor(journal_path, end)
            log_path = tmp / "daemon-restarted.log"
            started = time.perf_counter()
            started_wall = time.time()
            daemon = start_daemon(tmp, code, journal_path, base, log_path, compile_each_start=compile_each_start)
            try:
                await journal.append(ThoughtEntry(conversation="new", text="after the restart"))
                ready = asyncio.create_task(wait_ready(log_path, daemon))
                replied = await wait_reply(journal, "new", end, daemon, log_path)
                running = await ready
                peak = peak_rss_mb(daemon.pid)
                cpu = cpu_seconds(daemon.pid)
            finally:
                stop_daemon(daemon)
            journal_mb = journal_path.stat().st_size / 1e6
            print(
                f"  {case}, {design}, {size:,}: seconds after start: {phases(log_path, started_wall)},"
                f" reply {replied - started:.2f}; the daemon's CPU time by then {cpu:.2f} s",
                flush=True,
            )
            return Result(design, size, journal_mb, running - started, replied - started, peak)
        finally:
            await journal.aclose()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def table(title: str, unit: str, sizes: list[int], results: dict[tuple[str, int], Result]) -> None:
    """One case's results, the new design against the old where both were measured."""
    rows = []
    for size in sizes:
        new = results["new", size]
        old = results.get(("old", size))
        rows.append(
            [
                f"{size:,}",
                f"{new.journal_mb:.0f}",
                f"{new.running:.2f}",
                f"{old.running:.2f}" if old else "-",
                f"{new.first_reply:.2f}",
                f"{old.first_reply:.2f}" if old else "-",
                f"{old.first_reply / new.first_reply:.1f}x" if old else "-",
                f"{new.peak_rss_mb:.0f}",
                f"{old.peak_rss_mb:.0f}" if old else "-",
                f"{old.peak_rss_mb / new.peak_rss_mb:.1f}x" if old else "-",
            ]
        )
    print_table(
        title,
        [unit, "journal MB", "running s", "old s", "first reply s", "old s", "faster", "peak RSS MB", "old MB", "less"],
        rows,
    )


def missed(case: Case, sizes: list[int], results: dict[tuple[str, int], Result]) -> list[str]:
    """The targets the new design missed in ``case``."""
    failed = []
    for size in sizes:
        new = results["new", size]
        if new.first_reply > TARGET_SECONDS:
            failed.append(f"{case} {size:,}: first reply {new.first_reply:.2f} s > {TARGET_SECONDS:.0f} s")
        if new.peak_rss_mb > TARGET_RSS_MB:
            failed.append(f"{case} {size:,}: peak RSS {new.peak_rss_mb:.0f} MB > {TARGET_RSS_MB:.0f} MB")
    return failed


async def main() -> int:
    """Measure every size of both cases with the new and the old code, print the tables; exit 1 if
    a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 1000], help="journal sizes in MB")
    parser.add_argument("--baseline-max", type=int, default=1000, help="largest size (MB) measured with the baseline")
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="a revision with the old recovery (git)")
    parser.add_argument(
        "--backlog", type=int, nargs="*", default=[BACKLOG_ENTRIES], help="backlog sizes in entries (0: none)"
    )
    parser.add_argument(
        "--backlog-baseline-max",
        type=int,
        default=BACKLOG_ENTRIES,
        help="largest backlog (entries) measured with its baseline",
    )
    parser.add_argument(
        "--backlog-baseline-rev", default=BACKLOG_BASELINE_REV, help="a revision that read a backlog twice (git)"
    )
    parser.add_argument("--scratch", type=Path, default=None, help="where the journals are written (a temp dir)")
    parser.add_argument(
        "--compile-each-start",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE: without bytecode cached before, every start compiles the package",
    )
    args = parser.parse_args()
    backlogs = [size for size in args.backlog if size > 0]
    print(f"bench_restart: Codex 0.169.0, one idle conversation, then traffic; {machine_line()}")
    read: dict[tuple[str, int], Result] = {}
    backlog: dict[tuple[str, int], Result] = {}
    with tempfile.TemporaryDirectory(prefix="bench-restart-baseline-") as baseline_dir:
        scratch = args.scratch or Path(baseline_dir)
        old_read = None
        if args.sizes and args.baseline_max > 0:
            old_read = export_baseline(args.baseline_rev, Path(baseline_dir) / "read")
        old_backlog = None
        if backlogs and args.backlog_baseline_max > 0:
            old_backlog = export_baseline(args.backlog_baseline_rev, Path(baseline_dir) / "backlog")
        runs: list[tuple[Case, list[int], CodeTree | None, int, dict[tuple[str, int], Result]]] = [
            ("read", args.sizes, old_read, args.baseline_max, read),
            ("backlog", backlogs, old_backlog, args.backlog_baseline_max, backlog),
        ]
        async with ScriptedModelServer(responder=echo_responder) as server:
            for case, sizes, old, old_max, results in runs:
                for size in sizes:
                    results["new", size] = await measure(
                        case,
                        "new",
                        size,
                        CURRENT,
                        server=server,
                        scratch=scratch,
                        compile_each_start=args.compile_each_start,
                    )
                    print(f"  {case}, new, {size:,}: {results['new', size]}", flush=True)
                    if old is not None and size <= old_max:
                        results["old", size] = await measure(
                            case,
                            "old",
                            size,
                            old,
                            server=server,
                            scratch=scratch,
                            compile_each_start=args.compile_each_start,
                        )
                        print(f"  {case}, old, {size:,}: {results['old', size]}", flush=True)
    if args.sizes:
        table(
            "Restart to the first reply, and the daemon's peak RSS, by journal size (0.169.0)",
            "MB of traffic",
            args.sizes,
            read,
        )
    if backlogs:
        table(
            "Restart after a backlog written while the daemon was stopped (0.169.0)",
            "backlog entries",
            backlogs,
            backlog,
        )
    failed = missed("read", args.sizes, read) + missed("backlog", backlogs, backlog)
    for line in failed:
        print(f"TARGET MISSED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
