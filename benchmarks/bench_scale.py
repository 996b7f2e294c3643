"""Scale: N conversations on Codex 0.169.0, one thought each, against one Codex process per conversation.

Run: ``.venv/bin/python benchmarks/bench_scale.py [--sizes 1 10 50 200 1000] [--baseline-max 50] [--fd-limit 1024]
[--spread S] [--release-thread-after S] [--idle-reap S] [--profile DIR]``

For each N the daemon (``python -m coven_codex run``, a process of its own, with
``max_sessions = N`` so every conversation may run at once) serves N conversations against the
scripted model server (echo, in this process). One thought per conversation, appended evenly
over ``--spread`` seconds (conversation ``i`` at ``i * spread / N``; 0: all at once), the same
spread for every N of the run: issue 33's target is every conversation sending a thought within a
minute, and N = 50's baseline is the same minute (docs/performance.md says why); measured:

- *RSS*: the resident memory of the daemon plus every process under it (Codex and whatever
  Codex started), summed, once every conversation has its reply;
- *processes*: the daemon and every process under it, then;
- *all replied*: from appending the first thought to the last conversation's ``response`` entry
  in the journal; *p50 reply*: the median of the conversations' thought → reply times, each from
  its own thought's append; *p90 reply* the same;
- *errors*: ``error`` entries in the journal by then (the target: none);
- *CPU while serving*: CPU seconds from the first append to the last reply, of the daemon, of
  the Codex processes under it, and of this process (the scripted model server and the
  journal reads): where the time goes;
- *CPU 0-10 s after* and *idle CPU 10-20 s after*: CPU time of the daemon and every process
  under it over the 10 s right after the last reply (Codex finishing its turns) and over the 10 s
  after those (idle), as a percentage of one core; the idle target applies to the second, and
  the daemon's own part of it is shown apart (the rest is Codex's: docs/performance.md says what),
  and so is how many processes the machine started per second meanwhile (``/proc/stat``): Codex's
  skills watcher wakes on every one of them while a thread is loaded;
- *idle CPU after the release* (the shared design): the same over the 10 s that start once every
  conversation has let its thread go (its ``status: session_ended``, ``release_thread_after``
  seconds after its turn, default 30), with the process starts per second meanwhile, and the
  Codex processes still running then (the warm one: the pool keeps it for ``idle_reap``). This is
  the window the idle target applies to;
- *next thought*: then, for up to three conversations one after another, a second thought (its
  thread was let go: a ``thread/resume`` on the warm process before the turn) and at once a third
  (its thread loaded), each alone: thought → reply time and the CPU everything used meanwhile;
- *fds*: the daemon's open file descriptors right after the last reply.

The shared design runs under ``ulimit -n 1024`` (``--fd-limit``, soft and hard, for the daemon
and the Codex under it): N = 1000 shows that 1,000 conversations are served within the common
default limit.

``HOME`` is an empty folder: Codex snapshots the user's login shell for every thread, and what
a profile starts (on the measuring machine, ``pyenv init``'s rehash loops) is not coven's cost.

The baseline is the per-conversation-process design: the same measurement with the code of
``--baseline-rev`` (default :data:`BASELINE_REV`, the last revision of that design), exported
with ``git archive`` into a temporary folder (with what it needs that this environment no longer
has, e.g. ``jsonrpcserver``: ``_common.export_baseline``) and put first on ``PYTHONPATH``, for the sizes up
to ``--baseline-max`` (each of its conversations costs a Codex process of ~150 MB: 200 would not
fit most machines).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import tomlkit
from _common import CURRENT, CodeTree, export_baseline, machine_line, percentile, print_table

from coven_codex.entries import ErrorEntry, ThoughtEntry
from coven_codex.journal import START, FileJournal, JournalRecord, Position
from coven_codex.settings import Settings
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY, codex_config
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.responders import echo_responder

ROOT = Path(__file__).resolve().parent.parent
CODEX = ROOT / ".codex-cli" / "0.169.0" / "node_modules" / ".bin" / "codex"
IDLE_WINDOW = 10.0
REPLY_TIMEOUT = 600.0
MAX_SESSIONS = 256  # (settings.py: the bound of max_sessions)
"""The largest ``max_sessions``. Beyond it, conversations wait for a slot, and an idle one gives its slot (and
thread) to a waiter, writing a ``status: session_ended`` as an idle release does: the release phase waits for
every conversation's either way."""
RELEASE_DEFAULT = Settings.model_fields["release_thread_after"].default
"""The daemon's ``release_thread_after`` (unless ``--release-thread-after``)."""
NEXT_THOUGHTS = 3
"""Conversations that get a thought after the release and one more with their thread loaded."""
BASELINE_REV = "da53439"
"""The last revision with one ``codex app-server`` per conversation (the parent of the shared design)."""
SPREAD = 60.0
"""Seconds the N thoughts are appended over, at every N: issue 33's "every conversation sending a thought within
a minute"."""
P50_REFERENCE = 50
"""Issue 33: the p50 thought → reply of N = 1,000 (every larger N) within 2x this N's."""
TARGETS = {50: 600.0, 200: 1500.0, 1000: 2048.0}
"""Total RSS targets (MB) by N (issue 12)."""


@dataclass(frozen=True, slots=True)
class Result:
    design: str
    n: int
    rss_mb: float
    processes: int
    all_replied: float
    p50_reply: float
    p90_reply: float
    errors: int
    """``error`` entries in the journal once every conversation replied."""
    serving_cpu: CpuSplit
    """CPU seconds from the first append to the last reply."""
    busy_cpu_percent: float
    """CPU of everything over the 10 s right after the last reply (Codex finishing its turns)."""
    idle_cpu_percent: float
    """CPU of everything over the 10 s after those."""
    idle_daemon_percent: float
    """The daemon's own part of :attr:`idle_cpu_percent` (the rest is Codex's)."""
    idle_starts_per_second: float | None
    """Processes started on the machine per second during the idle window (None: no ``/proc/stat``)."""
    fds: int
    released: Released | None = None
    """After every conversation let its thread go (the shared design)."""


@dataclass(frozen=True, slots=True)
class CpuSplit:
    """CPU seconds (user + system) of the daemon, of the Codex processes under it, and of this
    process (the scripted model server and the journal reads): so far, or over a span."""

    daemon: float
    codex: float
    bench: float

    @classmethod
    def now(cls, pid: int) -> CpuSplit:
        """The CPU seconds used so far. Codex's: its processes' own and their ended children's (MCP
        servers, shell snapshots, commands), and those of Codex processes that ended."""
        daemon = codex = 0.0
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            times = process.cpu_times()
            daemon = times.user + times.system
            codex = times.children_user + times.children_system
            for child in process.children():
                with contextlib.suppress(psutil.Error):
                    used = child.cpu_times()
                    codex += used.user + used.system + used.children_user + used.children_system
        own = os.times()
        return cls(daemon, codex, own.user + own.system)

    def since(self, pid: int) -> CpuSplit:
        """The CPU seconds used from this sample to now."""
        later = CpuSplit.now(pid)
        return CpuSplit(later.daemon - self.daemon, later.codex - self.codex, later.bench - self.bench)

    def __str__(self) -> str:
        return f"daemon {self.daemon:.1f}, Codex {self.codex:.1f}, model server and bench {self.bench:.1f}"


@dataclass(frozen=True, slots=True)
class Thought:
    """One thought sent alone: how long until its reply, and the CPU everything used meanwhile."""

    reply: float
    cpu_seconds: float


@dataclass(frozen=True, slots=True)
class Released:
    """What the shared design does once every conversation let its thread go."""

    idle_cpu_percent: float
    """CPU of everything over the 10 s after the last thread was let go."""
    idle_daemon_percent: float
    starts_per_second: float | None
    codex_processes: int
    """Processes under the daemon then (the warm Codex, kept for ``idle_reap``)."""
    resumed: list[Thought]
    """Next thoughts whose thread was let go (a ``thread/resume`` on the warm process first)."""
    loaded: list[Thought]
    """Thoughts right after those, their threads loaded."""


def p50_reference(sizes: list[int]) -> int:
    """The N whose p50 thought → reply the larger N are held to (at most 2x): 50 (issue 33's
    baseline) when measured, else the smallest N of the run."""
    return P50_REFERENCE if P50_REFERENCE in sizes else min(sizes)


def tree_of(pid: int) -> list[psutil.Process]:
    """The process and every living process under it."""
    try:
        root = psutil.Process(pid)
        found = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    living = []
    for process in found:
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE:
                living.append(process)
    return living


def rss_mb(processes: list[psutil.Process]) -> float:
    """The summed resident memory of ``processes``, in MiB."""
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
    return total / 2**20


def cpu_seconds(processes: list[psutil.Process]) -> dict[int, float]:
    """CPU seconds (user + system) used so far by each of ``processes``, by pid."""
    seconds: dict[int, float] = {}
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            seconds[process.pid] = times.user + times.system
    return seconds


async def measure(
    design: str,
    n: int,
    code: CodeTree,
    server: ScriptedModelServer,
    extra: tuple[str, ...] = (),
    *,
    fd_limit: int | None = None,
    release_after: float | None = None,
    spread: float = 0.0,
    profile: Path | None = None,
) -> Result:
    """One daemon running ``code``, ``n`` conversations, one thought each (module
    docstring); with ``release_after`` (the shared design's ``release_thread_after``), what
    follows once every conversation let its thread go too."""
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{design}-{n}-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "ws"
        workspace.mkdir()
        home = tmp / "home"
        home.mkdir()
        journal_path = tmp / "journal.jsonl"
        base = tmp / "base.toml"
        base.write_text(tomlkit.dumps(codex_config(server.base_url)))
        env = {k: v for k, v in os.environ.items() if k not in {"CODEX_HOME", "OPENAI_API_KEY"}}
        env.update(
            {
                DEFAULT_ENV_KEY: "bench",
                "XDG_STATE_HOME": str(tmp / "state"),
                # An empty home: Codex snapshots the user's login shell per thread, and a profile
                # that runs e.g. `pyenv init` (rehash loops waiting on a lock) is not what is measured.
                "HOME": str(home),
                "PYTHONPATH": code.pythonpath,
                "PYTHONUNBUFFERED": "1",
            }
        )
        launcher = [sys.executable]
        if profile is not None:
            # cProfile writes its figures when the daemon's main returns (SIGTERM stops it cleanly).
            launcher += ["-m", "cProfile", "-o", str(profile / f"daemon-{design}-{n}.prof")]
        argv = [
            *launcher,
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
            "--max-sessions",
            str(min(n, MAX_SESSIONS)),
            *extra,
        ]
        if fd_limit is not None:
            argv = with_fd_limit(argv, fd_limit)
        log_path = tmp / "daemon.log"
        with log_path.open("wb") as log:
            daemon = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd=code.source,
            )
        journal = FileJournal(journal_path, durability="never")
        try:
            await wait_running(log_path, daemon)
            conversations = [f"c{index}" for index in range(n)]
            serving = CpuSplit.now(daemon.pid)
            started = time.perf_counter()
            async with asyncio.TaskGroup() as group:
                sending = group.create_task(send_spread(journal, conversations, spread))
                replied, position = await wait_entries(
                    journal, set(conversations), daemon, log_path, START, matches=is_reply
                )
            appended = sending.result()
            serving_cpu = serving.since(daemon.pid)
            all_replied = max(replied.values()) - started
            waits = [replied[c] - appended[c] for c in conversations]
            p50 = percentile(waits, 0.5)
            p90 = percentile(waits, 0.9)
            errors = await count_errors(journal)
            processes = tree_of(daemon.pid)
            memory = rss_mb(processes)
            fds = len(os.listdir(f"/proc/{daemon.pid}/fd"))
            busy, _ = await cpu_percent(daemon.pid)
            starts = processes_started()
            idle, idle_daemon = await cpu_percent(daemon.pid)
            after = processes_started()
            rate = (after - starts) / IDLE_WINDOW if starts is not None and after is not None else None
            released = None
            print(
                f"  {design}, N={n}: RSS {memory:.0f} MB, {len(processes)} processes, all replied {all_replied:.1f} s,"
                f" p50 reply {p50:.2f} s, p90 {p90:.2f} s, {errors} errors, CPU s while serving {serving_cpu},"
                f" CPU {busy:.1f} % 0-10 s after, {idle:.1f} % 10-20 s after, {fds} fds",
                flush=True,
            )
            if release_after is not None:
                released = await after_release(journal, list(appended), daemon, log_path, position)
            return Result(
                design,
                n,
                memory,
                len(processes),
                all_replied,
                p50,
                p90,
                errors,
                serving_cpu,
                busy,
                idle,
                idle_daemon,
                rate,
                fds,
                released,
            )
        finally:
            await journal.aclose()
            daemon.terminate()
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


async def send_spread(journal: FileJournal, conversations: list[str], spread: float) -> dict[str, float]:
    """Append one thought per conversation, conversation ``i`` at ``i * spread / len(conversations)``
    seconds from now (all at once for 0); when each was appended (``time.perf_counter``)."""
    appended: dict[str, float] = {}
    started = time.perf_counter()
    for index, conversation in enumerate(conversations):
        due = started + index * spread / len(conversations)
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        appended[conversation] = time.perf_counter()
        await journal.append(ThoughtEntry(conversation=conversation, text=f"hello {index}"))
    return appended


async def count_errors(journal: FileJournal) -> int:
    """The ``error`` entries in the journal (their codes and first texts printed)."""
    items = await journal.read(START)
    errors = [item.entry for item in items if isinstance(item, JournalRecord) and isinstance(item.entry, ErrorEntry)]
    for text in sorted({f"{error.code}: {error.text}" for error in errors})[:5]:
        print(f"  error entry: {text[:300]}", flush=True)
    return len(errors)


def with_fd_limit(argv: list[str], limit: int) -> list[str]:
    """``argv`` run as after ``ulimit -n limit`` (soft and hard): the daemon and every Codex
    process under it live with at most ``limit`` open files each."""
    code = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit})); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", code, *argv]


def processes_started() -> int | None:
    """Processes started on the machine since boot (Linux ``/proc/stat``), or None elsewhere."""
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                if line.startswith("processes "):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


async def cpu_percent(pid: int) -> tuple[float, float]:
    """CPU time of ``pid`` and every process under it over :data:`IDLE_WINDOW`, in % of one core
    (processes that ended meanwhile count up to their last look), and ``pid``'s own part."""
    before = cpu_seconds(tree_of(pid))
    await asyncio.sleep(IDLE_WINDOW)
    after = cpu_seconds(tree_of(pid))
    used = {p: after.get(p, seconds) - seconds for p, seconds in before.items()}
    used.update({p: seconds for p, seconds in after.items() if p not in before})
    return 100 * sum(used.values()) / IDLE_WINDOW, 100 * used.get(pid, 0.0) / IDLE_WINDOW


async def wait_running(log_path: Path, daemon: subprocess.Popen[bytes]) -> None:
    """Wait (at most a minute) until the daemon logs that it runs."""
    deadline = time.monotonic() + 60
    while b"daemon running" not in log_path.read_bytes():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not start:\n{log_path.read_text()[-2000:]}")
        await asyncio.sleep(0.1)


def is_reply(record: JournalRecord) -> bool:
    """A ``response`` entry (a conversation's reply)."""
    return record.entry.kind == "response"


def is_release(record: JournalRecord) -> bool:
    """A ``status: session_ended`` (a conversation let its thread go)."""
    return record.entry.kind == "status" and getattr(record.entry, "state", None) == "session_ended"


async def wait_entries(
    journal: FileJournal,
    conversations: set[str],
    daemon: subprocess.Popen[bytes],
    log_path: Path,
    position: Position,
    *,
    matches: Callable[[JournalRecord], bool],
    poll: float = 0.05,
) -> tuple[dict[str, float], Position]:
    """When each conversation's first entry after ``position`` that ``matches`` appeared (the
    journal polled every ``poll`` seconds, at most :data:`REPLY_TIMEOUT`), and where reading stopped."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + REPLY_TIMEOUT
    while len(seen) < len(conversations):
        items = await journal.read(position)
        now = time.perf_counter()
        for item in items:
            position = max(position, item.end)
            if isinstance(item, JournalRecord) and item.entry.conversation in conversations and matches(item):
                seen.setdefault(item.entry.conversation, now)
        if daemon.poll() is not None or time.monotonic() > deadline:
            missing = sorted(conversations - set(seen))[:5]
            raise RuntimeError(f"nothing awaited for {missing} ...:\n{log_path.read_text()[-3000:]}")
        await asyncio.sleep(poll)
    return seen, position


async def after_release(
    journal: FileJournal,
    conversations: list[str],
    daemon: subprocess.Popen[bytes],
    log_path: Path,
    position: Position,
) -> Released:
    """Wait until every conversation let its thread go, measure the idle window, then send the
    next thoughts (module docstring)."""
    # From the start: the first conversations let their threads go while the last ones still waited for their replies.
    await wait_entries(journal, set(conversations), daemon, log_path, START, matches=is_release)
    starts = processes_started()
    idle, idle_daemon = await cpu_percent(daemon.pid)
    after = processes_started()
    rate = (after - starts) / IDLE_WINDOW if starts is not None and after is not None else None
    codex = len(tree_of(daemon.pid)) - 1
    resumed: list[Thought] = []
    loaded: list[Thought] = []
    for conversation in conversations[:NEXT_THOUGHTS]:
        for into in (resumed, loaded):
            before = cpu_seconds(tree_of(daemon.pid))
            sent = time.perf_counter()
            await journal.append(ThoughtEntry(conversation=conversation, text=f"again {len(into)}"))
            replied, position = await wait_entries(
                journal, {conversation}, daemon, log_path, position, matches=is_reply, poll=0.01
            )
            used = cpu_seconds(tree_of(daemon.pid))
            spent = sum(seconds - before.get(pid, 0.0) for pid, seconds in used.items())
            into.append(Thought(replied[conversation] - sent, spent))
    return Released(idle, idle_daemon, rate, codex, resumed, loaded)


async def main() -> int:
    """Measure every size with both designs, print the table; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 50, 200, 1000])
    parser.add_argument(
        "--fd-limit",
        type=int,
        default=1024,
        help="ulimit -n (soft and hard) of the shared design's daemon and Codex; 0: the inherited limit",
    )
    parser.add_argument("--baseline-max", type=int, default=50, help="largest N measured with the baseline")
    parser.add_argument("--app-servers", type=int, default=1, help="shared app-servers (the app_servers setting)")
    parser.add_argument(
        "--spread",
        type=float,
        default=SPREAD,
        help=f"append the N thoughts evenly over this many seconds, at every N (default {SPREAD:g}: issue 33's "
        "'every conversation sending a thought within a minute'); 0: all at once",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="run the daemon under cProfile and write daemon-<design>-<N>.prof into this folder",
    )
    parser.add_argument(
        "--release-thread-after",
        type=float,
        default=RELEASE_DEFAULT,
        help=f"the shared design's release_thread_after (default: the daemon's, {RELEASE_DEFAULT:g} s); the idle "
        "window the target applies to starts once every conversation let its thread go",
    )
    parser.add_argument(
        "--idle-reap",
        type=float,
        default=None,
        help="the shared design's idle_reap: how long the warm Codex is kept with no thread (default: the "
        "daemon's, 1800 s)",
    )
    parser.add_argument(
        "--baseline-rev", default=BASELINE_REV, help="a revision with one app-server per conversation (git)"
    )
    args = parser.parse_args()
    print(f"bench_scale: Codex 0.169.0, one thought per conversation, spread over {args.spread:g} s; {machine_line()}")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, int], Result] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-baseline-") as baseline_dir:
        baseline = None
        if args.baseline_max > 0:
            baseline = export_baseline(args.baseline_rev, Path(baseline_dir))
        async with ScriptedModelServer(responder=echo_responder) as server:
            for n in args.sizes:
                extra: tuple[str, ...] = ("--app-servers", str(args.app_servers))
                extra += ("--release-thread-after", str(args.release_thread_after))
                if args.idle_reap is not None:
                    extra += ("--idle-reap", str(args.idle_reap))
                results["shared", n] = await measure(
                    "shared",
                    n,
                    CURRENT,
                    server,
                    extra,
                    fd_limit=args.fd_limit or None,
                    release_after=args.release_thread_after,
                    spread=args.spread,
                    profile=args.profile,
                )
                print(f"  shared app-server, N={n}: {results['shared', n]}", flush=True)
                if baseline is not None and n <= args.baseline_max:
                    results["per-conversation", n] = await measure(
                        "per-conversation", n, baseline, server, spread=args.spread
                    )
                    print(f"  per-conversation, N={n}: {results['per-conversation', n]}", flush=True)
    rows = []
    for (design, n), r in sorted(results.items(), key=lambda item: (item[0][1], item[0][0] != "shared")):
        base = results.get(("per-conversation", n))
        shown = f"{r.rss_mb:.0f}"
        if design == "shared" and base is not None:
            shown += f" ({base.rss_mb / r.rss_mb:.1f}x less)"
        p50 = f"{r.p50_reply:.2f}"
        reference = results.get((design, p50_reference(args.sizes)))
        if reference is not None and n > reference.n:
            p50 += f" ({r.p50_reply / reference.p50_reply:.2f}x N = {reference.n}'s)"
        rows.append(
            [
                n,
                design,
                shown,
                r.processes,
                f"{r.all_replied:.2f}",
                p50,
                f"{r.p90_reply:.2f}",
                r.errors,
                f"{r.serving_cpu.daemon:.1f} / {r.serving_cpu.codex:.1f} / {r.serving_cpu.bench:.1f}",
                f"{r.busy_cpu_percent:.2f}",
                f"{r.idle_cpu_percent:.2f}",
                f"{r.idle_daemon_percent:.2f}",
                "" if r.idle_starts_per_second is None else f"{r.idle_starts_per_second:.0f}",
                r.fds,
            ]
        )
    print_table(
        f"N conversations, one thought each, spread over {args.spread:g} s (0.169.0)",
        [
            "N",
            "design",
            "total RSS MB",
            "processes",
            "all replied s",
            "p50 reply s",
            "p90 reply s",
            "errors",
            "CPU s serving: daemon / Codex / model server",
            "CPU % 0-10 s after",
            "idle CPU % 10-20 s after",
            "of it the daemon's",
            "process starts/s meanwhile",
            "fds",
        ],
        rows,
    )
    released_rows = []
    for (_, n), r in sorted(results.items(), key=lambda item: item[0][1]):
        if r.released is None:
            continue
        x = r.released
        released_rows.append(
            [
                n,
                f"{x.idle_cpu_percent:.2f}",
                f"{x.idle_daemon_percent:.2f}",
                "" if x.starts_per_second is None else f"{x.starts_per_second:.0f}",
                x.codex_processes,
                " ".join(f"{t.reply:.2f}" for t in x.resumed),
                " ".join(f"{t.reply:.2f}" for t in x.loaded),
                " ".join(f"{t.cpu_seconds:.2f}" for t in x.resumed),
                " ".join(f"{t.cpu_seconds:.2f}" for t in x.loaded),
            ]
        )
    print_table(
        f"After every conversation let its thread go (release_thread_after {args.release_thread_after:g} s; "
        "the idle window starts then)",
        [
            "N",
            "idle CPU % (10 s)",
            "of it the daemon's",
            "process starts/s meanwhile",
            "Codex processes (warm)",
            "next thought: resumed, reply s",
            "then loaded, reply s",
            "resumed: CPU s",
            "loaded: CPU s",
        ],
        released_rows,
    )
    failed = []
    for n, limit in TARGETS.items():
        shared = results.get(("shared", n))
        if shared is not None and shared.rss_mb > limit:
            failed.append(f"N={n}: {shared.rss_mb:.0f} MB > {limit:.0f} MB")
    for (design, n), r in results.items():
        if design == "shared" and r.released is not None and r.released.idle_cpu_percent > 0.5:
            failed.append(f"N={n}: idle CPU after the release {r.released.idle_cpu_percent:.2f}% > 0.5%")
    reference = results.get(("shared", p50_reference(args.sizes)))
    for (design, n), r in results.items():
        if design == "shared" and r.errors:
            failed.append(f"N={n}: {r.errors} error entries")
        if design == "shared" and reference is not None and n > reference.n and r.p50_reply > 2 * reference.p50_reply:
            failed.append(f"N={n}: p50 reply {r.p50_reply:.2f} s > 2x N = {reference.n}'s {reference.p50_reply:.2f} s")
    for line in failed:
        print(f"TARGET MISSED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
