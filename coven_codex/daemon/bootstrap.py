"""Everything ``coven-codex run`` sets up before the daemon runs, from one :class:`Settings`.

1. find the Codex executable (refusing one inside the workspace), decide how to start it (its
   native binary, :mod:`coven_codex.codex.launch`) and read its version, move the
   folders older versions kept inside the workspace (:mod:`coven_codex.daemon.layout`), then
   open the journal and take the locks (one daemon per journal, per state directory and per
   ``CODEX_HOME``), then find the folder of this journal's conversation state by its identity
   (:mod:`coven_codex.agent.scope`; an older version's state moves there the first time);
2. pick the CODEX driver by what the installed binary offers
   (:func:`coven_codex.codex.capabilities.plan_driver`: ``app-server`` where its protocol has
   everything the driver uses, else ``exec``; cached per binary in the state directory;
   ``driver`` in the settings may force ``exec``, or ``app-server`` where it suffices);
3. load the spells and start their MCP server on a private socket (when there are spells);
4. prepare the isolated ``CODEX_HOME`` (base config + coven's keys + the MCP entry);
5. start the webhook senders when ``[webhooks] in_daemon`` is on (:mod:`coven_codex.webhooks`, a
   task and a journal handle of their own);
6. run the :class:`~coven_codex.daemon.daemon.Daemon` on the journal until ``stop`` (it starts the
   shared app-server ahead of the first thought, :meth:`DriverMaker.prestart`, while it recovers).

Every failure a user can cause raises :class:`BootstrapError` with what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from coven_codex import __version__
from coven_codex.agent.chat_settings import project_problems
from coven_codex.agent.egress import AppendHook
from coven_codex.agent.scope import Scope, ScopeError, open_scope
from coven_codex.agent.storage import StorageFailed
from coven_codex.attachments import file_spells, uploads_dir
from coven_codex.codex.appserver import AppServerPool, raise_fd_limit
from coven_codex.codex.capabilities import CapabilityError, DriverPlan, detect_capabilities, plan_driver
from coven_codex.codex.discovery import DiscoveryError, FoundExecutable, find_codex
from coven_codex.codex.driver_settings import MODES, SANDBOX_WIDTH
from coven_codex.codex.drivers import (
    CodexDriver,
    DriverSettings,
    EventSink,
    ThreadOptions,
    create_driver,
    unrelayed_approvals,
)
from coven_codex.codex.home import CodexHome, CodexHomeError, DriverKind, prepare_codex_home
from coven_codex.codex.launch import CodexLaunch, relative_path_entries, resolve_launch
from coven_codex.codex.version import CodexVersion, VersionError, detect_version
from coven_codex.daemon.daemon import Daemon, Ready
from coven_codex.daemon.layout import LayoutError, migrate_legacy_layout
from coven_codex.daemon.thread_homes import DaemonThreadHomes
from coven_codex.journal import START, FileJournal, Journal, JournalError, StorageError
from coven_codex.journal.file import FILE_MODE
from coven_codex.journal.opening import (
    JournalName,
    JournalOptions,
    describe_journal,
    is_redis_name,
    local_base,
    open_journal,
)
from coven_codex.journal.redis.holds import SingleDaemonServes, cluster_refusal, daemon_refusal
from coven_codex.mcp import (
    TOOLBELT_FILENAME,
    SpellDefinitionError,
    SpellLoadError,
    SpellRegistry,
    SpellServer,
    SpellServerError,
    codex_mcp_entry,
    load_configured_spells,
    write_toolbelt,
)
from coven_codex.metrics.checks import journal_reachable, report_lag
from coven_codex.metrics.instruments import Instruments, Refresh
from coven_codex.metrics.server import MetricsServer, ReadinessCheck
from coven_codex.rollout.locator import locate_rollout
from coven_codex.settings import Settings, state_root
from coven_codex.support.statelock import JournalLock, StateError, StateLock
from coven_codex.traces.otel_config import export_notice, otel_tables
from coven_codex.webhooks.config import ReadyTarget, WebhookConfigError, ready_targets

if TYPE_CHECKING:
    from coven_codex.cluster.ownership import Ownership
    from coven_codex.journal.redis.holds import RedisHold

log = logging.getLogger(__name__)
TRACES_DIR = "traces"

ROLLOUT_LOCATE_TIMEOUT = 10.0
HOLD_RELEASE_TIMEOUT: Final = 2.0
"""A clean stop gives the journal's hold back within this (seconds); else it runs out by itself."""


class BootstrapError(RuntimeError):
    """The daemon cannot start; the message says what to do."""


@dataclass(slots=True)
class Hooks:
    """Instrumentation for benchmarks."""

    on_append: AppendHook | None = None


def driver_settings(settings: Settings) -> DriverSettings:
    """The drivers' and the app-servers' part of the daemon's settings."""
    return DriverSettings(
        turn_timeout=settings.turn_timeout,
        stream_idle_timeout=settings.stream_idle_timeout,
        kill_grace=settings.kill_grace,
        mid_turn=settings.mid_turn,
        approval_policy=settings.approval_policy,
        approval_timeout=settings.approval_timeout,
        stream_deltas=settings.stream_deltas,
    )


@dataclass(slots=True)
class DriverMaker:
    """Makes a conversation's CODEX driver (app-server or exec; the session consumes its events)."""

    plan: DriverPlan
    """What the drivers it makes can do: the one record of it, built once from the probe."""
    executable: Path
    command: tuple[str, ...]
    version: CodexVersion
    env: Mapping[str, str] = field(repr=False)
    cwd: Path
    settings: Settings
    pool: AppServerPool | None = field(default=None, init=False)
    """The shared app-servers every conversation's thread runs on (app-server driver)."""

    @property
    def driver(self) -> DriverKind:
        """The driver every conversation runs on."""
        return self.plan.driver

    def __post_init__(self) -> None:
        if self.driver == "app-server":
            raised = raise_fd_limit()
            if raised is not None:
                log.info("raised the open-file limit from %d to %d (its hard limit) for the shared Codex", *raised)
            self.pool = AppServerPool(
                self.command,
                env=self.env,
                cwd=self.cwd,
                settings=driver_settings(self.settings),
                size=self.settings.app_servers,
                restart_backoff=self.settings.restart_backoff,
                keep_idle=self.settings.idle_reap,
            )

    def prestart(self) -> None:
        """Start a shared app-server in the background, for the first thought (app-server driver;
        kept warm like any process with no thread, and ended after ``idle_reap`` seconds if no
        thought comes)."""
        if self.pool is not None:
            self.pool.prestart()

    async def aclose(self) -> None:
        """End the shared app-servers (after every driver is closed)."""
        if self.pool is not None:
            await self.pool.aclose()

    def __call__(self, conversation: str, options: ThreadOptions, sink: EventSink) -> CodexDriver:
        """The driver of ``conversation``'s thread, opened with ``options`` (not started yet)."""
        settings = driver_settings(self.settings)
        timeout = options.turn_timeout
        if timeout is not None:
            timeout = min(timeout, settings.turn_timeout)
            settings = dataclasses.replace(
                settings, turn_timeout=timeout, stream_idle_timeout=min(settings.stream_idle_timeout, timeout)
            )
        settings = dataclasses.replace(settings, model=options.model, fork_from=options.fork_from, mode=options.mode)
        cwd = Path(options.workspace) if options.workspace is not None else self.cwd
        return create_driver(
            self.executable,
            self.version,
            cwd,
            env=self.env,
            settings=settings,
            sink=sink,
            plan=self.plan,
            command=self.command,
            pool=self.pool,
        )


def create_journal(path: Path) -> None:
    """Create the journal file if it is missing (as ``run --help`` promises), never truncating it."""
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE))


async def _open_daemon_journal(name: Path | str, settings: Settings) -> tuple[Journal, Path | None]:
    """The daemon's journal, reachable, and for a file journal the lock file that keeps a second daemon off it
    (a Redis journal's is a hold in Redis, :func:`_hold_redis_journal`).

    A file journal is created if missing. A Redis journal must answer at once (a wrong URL, a wrong
    password or a Redis that is not running fails the start; later outages are waited out,
    docs/journal-protocol.md).
    """
    if not is_redis_name(name):
        await asyncio.to_thread(create_journal, Path(name))
        file_journal = FileJournal(
            Path(name),
            durability=settings.durability,
            follow_replacement=False,
            segment_bytes=settings.journal_segment_bytes,
            segment_age=settings.journal_segment_age,
            retention=settings.journal_retention,
            archive=settings.journal_archive,
        )
        return file_journal, file_journal.daemon_lock_path()
    from coven_codex.journal.redis import RedisJournal  # noqa: PLC0415 (the optional [redis] extra)

    journal = open_journal(name)
    assert isinstance(journal, RedisJournal)
    try:
        await journal.connect()
    except JournalError:  # unreachable, a wrong password, rediss:// on a plain server: each says what to fix
        await journal.aclose()
        raise
    return journal, None


async def _hold_redis_journal(
    stack: contextlib.AsyncExitStack, journal: Journal, settings: Settings
) -> RedisHold | None:
    """One daemon per Redis journal, across machines (docs/distributed.md, "One daemon per journal").

    Without ``cluster``: the journal's hold (``NAME:daemon``), refused while another daemon holds it or
    cluster daemons are live; given back at a clean stop, run out ``lease_time`` after a ``kill -9``.
    With ``cluster``: this daemon enters the live set now, refused while a daemon without cluster holds
    the journal. Called with the state directory's lock held (the daemon id is that directory's).
    """
    from coven_codex.cluster.keys import ClusterKeys  # noqa: PLC0415 (the optional [redis] extra)
    from coven_codex.cluster.registry import Registry  # noqa: PLC0415
    from coven_codex.cluster.setup import daemon_id  # noqa: PLC0415
    from coven_codex.journal.redis import RedisJournal  # noqa: PLC0415
    from coven_codex.journal.redis.holds import RedisHold  # noqa: PLC0415

    assert isinstance(journal, RedisJournal) and settings.journal is not None
    name = describe_journal(settings.journal)
    keys = ClusterKeys(journal.location.key)
    owner = await asyncio.to_thread(daemon_id, settings.resolved_state_dir)
    if settings.cluster:
        registry = Registry(
            journal.client, keys, daemon_id=owner, ttl=settings.lease_time, reachability=journal.reachability
        )
        try:
            await registry.heartbeat(joining=True)
        except SingleDaemonServes as exc:
            raise BootstrapError(cluster_refusal(name, exc.holder)) from None
        return None
    hold = RedisHold(journal, journal.location.daemon, owner=owner, ttl=settings.lease_time, conflicts=(keys.daemons,))
    found = await hold.take()
    if found is not None:
        raise BootstrapError(daemon_refusal(name, found, settings.lease_time))
    stack.push_async_callback(hold.release_within, HOLD_RELEASE_TIMEOUT)
    return hold


async def _open_scope(journal: Journal, settings: Settings) -> Scope:
    """The folder of this journal's conversation state (:mod:`coven_codex.agent.scope`), logged."""
    assert settings.journal is not None
    name = describe_journal(settings.journal)
    try:
        scope = await open_scope(journal, name, settings.resolved_state_dir)
    except (ScopeError, JournalError, StateError, TimeoutError) as exc:
        if isinstance(exc, TimeoutError):
            raise BootstrapError(
                f"moving an older coven-codex's conversation state to the journal {name} took too long (reading the"
                " journal); start again, or move <state_dir>/sessions aside to start those conversations afresh"
            ) from None
        raise BootstrapError(str(exc)) from None
    log.info(
        "journal %s is %s (kept in %s)%s; its conversations' state is in %s",
        name,
        scope.identity.value,
        scope.identity.location,
        " (recorded now: its first start)" if scope.identity.made_now else "",
        scope.directory,
    )
    return scope


async def _join_cluster(
    stack: contextlib.AsyncExitStack, journal: Journal, settings: Settings, codex_home: Path
) -> Ownership | None:
    """With ``cluster`` on a Redis journal, this daemon's place among the daemons sharing it (docs/distributed.md)."""
    name = settings.journal
    if not settings.cluster:
        return None
    if name is None or not is_redis_name(name):
        raise BootstrapError(
            "cluster = true needs a Redis journal (--journal redis://HOST:PORT/DB?key=NAME): daemons share"
            " conversations only through Redis"
        )
    from coven_codex.cluster.setup import joined  # noqa: PLC0415 (the optional [redis] extra)
    from coven_codex.journal.redis import RedisJournal  # noqa: PLC0415

    assert isinstance(journal, RedisJournal)
    ownership = await stack.enter_async_context(
        joined(
            journal=journal,
            state_dir=settings.resolved_state_dir,
            codex_home=codex_home,
            lease_time=settings.lease_time,
        )
    )
    log.info(
        "cluster: daemon %s on %s (lease %gs)",
        ownership.node.daemon_id,
        describe_journal(name),
        settings.lease_time,
    )
    return ownership


def choose(
    settings: Settings, program: Path, command: tuple[str, ...], version: CodexVersion, env: Mapping[str, str]
) -> DriverPlan:
    """The driver for this Codex binary's capabilities and the ``driver`` setting (blocking: run
    it in a thread); raises :class:`BootstrapError`."""
    capabilities = detect_capabilities(program, command, version, env=env, cache_dir=settings.resolved_state_dir)
    try:
        return plan_driver(capabilities, settings.driver)
    except CapabilityError as exc:
        raise BootstrapError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class FoundCodex:
    """The Codex the daemon runs: where it was found, how it is started, its version and its driver."""

    found: FoundExecutable
    launch: CodexLaunch
    version: CodexVersion
    plan: DriverPlan


async def run_daemon(
    settings: Settings,
    stop: asyncio.Event,
    *,
    ready: Ready | None = None,
    hooks: Hooks | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Set everything up and serve until ``stop`` is set; raises :class:`BootstrapError`.

    The steps, in order (the module docstring says why): check the settings, move an old state
    layout, read the webhook targets, find Codex; then, under one exit stack, open the journal and
    take the locks, open this journal's state scope, serve metrics, spells and traces, prepare
    ``CODEX_HOME``, start the webhook senders, join a cluster, and run the daemon.
    """
    log.info("coven-codex %s starting (pid %d)", __version__, os.getpid())
    hooks = hooks or Hooks()
    env_in = dict(os.environ if environ is None else environ)
    journal_name, workspace = _checked_start(settings)
    await _migrate_layout(settings, workspace)
    webhooks = _webhook_targets(settings, env_in)
    codex = await _find_codex(settings, workspace, env_in)
    if stop.is_set():  # stopped while Codex was looked at: nothing is taken or started yet
        log.info("stopped during start-up, before taking the locks: exiting")
        return
    async with contextlib.AsyncExitStack() as stack:
        journal, journal_hold = await _take_journal(stack, journal_name, settings)
        scope = await _open_scope(journal, settings)
        metrics = await _serve_metrics(stack, settings, journal, codex.found.path)
        instruments = metrics.instruments if metrics is not None else None
        owned: dict[tuple[str, ...], dict[str, object]] = {}
        homes = await _serve_spells(
            stack, settings, workspace, codex.version, instruments, owned, journal, journal_name
        )
        await _collect_traces(stack, settings, codex.version, owned)
        home = await _prepare_home(settings, workspace, codex.plan.driver, owned, env_in)
        maker = _driver_maker(codex, home, workspace, settings)
        stack.push_async_callback(maker.aclose)  # (shutdown closes it first; this covers a failed start)
        if webhooks:
            await _start_webhooks(stack, settings, journal_name, workspace, webhooks)
            if instruments is not None:
                instruments.refreshers.append(_webhook_lag(journal, instruments, webhooks))
        ownership = await _join_cluster(stack, journal, settings, home.path)
        daemon = _daemon(
            settings,
            journal,
            maker,
            codex_home=home.path,
            scope=scope,
            hooks=hooks,
            ownership=ownership,
            instruments=instruments,
        )
        homes.daemon = daemon
        if metrics is not None:
            metrics.checks["daemon"] = daemon_serving(daemon)
        await _run(daemon, journal_hold, journal_name, stop, ready)


def _checked_start(settings: Settings) -> tuple[JournalName, Path]:
    """The journal and the workspace (resolved), or :class:`BootstrapError` saying what to give."""
    if settings.journal is None:
        raise BootstrapError("no journal given: pass --journal PATH or set journal in coven.toml")
    workspace = settings.workspace.expanduser().resolve()
    if not workspace.is_dir():
        raise BootstrapError(f"the workspace {workspace} is not a directory; create it or fix --workspace")
    problems = project_problems(settings)
    if problems:
        raise BootstrapError("; ".join(problems))
    return settings.journal, workspace


async def _migrate_layout(settings: Settings, workspace: Path) -> None:
    """Before anything writes to the state directory (the capability cache does): an old state
    folder inside the workspace moves there first."""
    try:
        await asyncio.to_thread(migrate_legacy_layout, settings, workspace)
    except LayoutError as exc:
        raise BootstrapError(str(exc)) from None


def _webhook_targets(settings: Settings, env_in: dict[str, str]) -> list[ReadyTarget]:
    """The in-daemon webhook targets, read before anything starts: a missing secret stops `run` at once."""
    if not settings.webhooks.in_daemon:
        return []
    try:
        return ready_targets(settings.webhooks.targets, env_in)
    except WebhookConfigError as exc:
        raise BootstrapError(str(exc)) from None


async def _find_codex(settings: Settings, workspace: Path, env_in: Mapping[str, str]) -> FoundCodex:
    """Find Codex, how to start it, its version and its driver (by capability); log what was found."""
    try:
        found = await asyncio.to_thread(find_codex, settings.codex_path, workspace, env=env_in)
        launch = await asyncio.to_thread(resolve_launch, found, env_in)
        version = await asyncio.to_thread(
            detect_version, launch.program, env=launch.environment(env_in), command=launch.command
        )
        plan = await asyncio.to_thread(
            choose, settings, launch.program, launch.command, version, launch.environment(env_in)
        )
    except (DiscoveryError, VersionError, OSError) as exc:
        raise BootstrapError(str(exc)) from None
    log.info(
        "Codex %s at %s (%s), started as the %s; driver %s",
        version,
        found.path,
        found.source,
        launch.describe(),
        plan.reason,
    )
    if plan.driver == "app-server" and (unrelayed := unrelayed_approvals(plan)):
        log.info("this Codex may also ask %s, which coven-codex refuses", ", ".join(unrelayed))
    if relative := relative_path_entries(env_in):
        log.warning(
            "PATH has relative or empty entries (%s); they are left out of the PATH given to Codex",
            ", ".join(repr(entry) for entry in relative[:5]),
        )
    return FoundCodex(found, launch, version, plan)


async def _take_journal(
    stack: contextlib.AsyncExitStack, name: JournalName, settings: Settings
) -> tuple[Journal, RedisHold | None]:
    """Open the journal and take the locks, first: a second daemon must not even rewrite the shared
    CODEX_HOME. One daemon per journal (two would answer every thought twice), per state directory, and
    per CODEX_HOME (the processes a daemon finds there at start are its own strays). A Redis journal is
    held instead of locked (returned); daemons in a cluster divide it by leases (docs/distributed.md)."""
    try:
        journal, lock_path = await _open_daemon_journal(name, settings)
    except OSError as exc:
        raise BootstrapError(
            f"cannot create the journal {name} ({exc.strerror}); check --journal and its folder's permissions"
        ) from None
    except JournalError as exc:
        raise BootstrapError(str(exc)) from None
    stack.push_async_callback(journal.aclose)
    try:
        if lock_path is not None:
            stack.enter_context(JournalLock(describe_journal(name), lock_path))
        for directory in (settings.resolved_state_dir, settings.resolved_codex_home):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            stack.enter_context(StateLock(directory))
    except (StateError, OSError) as exc:
        raise BootstrapError(str(exc)) from None
    if lock_path is not None:
        return journal, None
    try:
        return journal, await _hold_redis_journal(stack, journal, settings)
    except JournalError as exc:
        raise BootstrapError(str(exc)) from None


async def _serve_spells(  # noqa: PLR0917 (the start's pieces in the order run_daemon makes them; it is at its 60 lines)
    stack: contextlib.AsyncExitStack,
    settings: Settings,
    workspace: Path,
    version: CodexVersion,
    instruments: Instruments | None,
    owned: dict[tuple[str, ...], dict[str, object]],
    journal: Journal,
    journal_name: JournalName,
) -> DaemonThreadHomes:
    """Load the spells, add the built-in ``send_file`` (files out, :mod:`coven_codex.attachments.files_out`)
    as ``send_file`` says, and serve them on a private socket; their entry goes into Codex's config
    (``owned``). Nothing is served when there is nothing to serve: Codex starts the spells' MCP server
    (the shim, a process) for every thread it loads, so ``auto`` adds ``send_file`` only beside spells
    of the user's own. Returns what tells ``send_file`` where a thread lives (given the daemon later)."""
    homes = DaemonThreadHomes(workspace)
    files_out = settings.send_file == "on" or (settings.send_file == "auto" and bool(settings.spells))
    if not files_out and not settings.spells:
        log.info('no spells to serve (send_file is %s: send_file = "on" lets Codex send files)', settings.send_file)
        return homes
    registry = (
        file_spells(
            journal,
            homes=homes,
            folder=uploads_dir(local_base(journal_name, state_root())),
            max_bytes=settings.max_file_bytes,
        )
        if files_out
        else SpellRegistry()
    )
    try:
        # Never from the workspace: Codex writes there, and a module it wrote must not run here.
        if settings.spells:
            registry.include(await asyncio.to_thread(load_configured_spells, settings.spells, workspace=workspace))
        server = SpellServer(
            registry,
            label=str(workspace),
            on_call=instruments.spell_called if instruments is not None else None,
        )
        await stack.enter_async_context(server)
    except SpellDefinitionError as exc:
        raise BootstrapError(f"{exc} (send_file is built in: rename your spell)" if files_out else str(exc)) from None
    except (SpellLoadError, SpellServerError) as exc:
        raise BootstrapError(str(exc)) from None
    toolbelt_path = await asyncio.to_thread(write_toolbelt, registry, settings.resolved_state_dir / TOOLBELT_FILENAME)
    log.info("%d spell(s) served; their tool definitions are in %s", len(registry), toolbelt_path)
    owned[("mcp_servers", "coven")] = codex_mcp_entry(
        server.socket_path, server.secret, str(version), tool_timeout=registry.longest_timeout
    )
    return homes


async def _collect_traces(
    stack: contextlib.AsyncExitStack,
    settings: Settings,
    version: CodexVersion,
    owned: dict[tuple[str, ...], dict[str, object]],
) -> None:
    """With ``collect_traces``: receive Codex's OpenTelemetry export (its tables go into ``owned``).
    Started before Codex, and closed after every Codex process is gone (the stack unwinds last-in first-out)."""
    if not settings.collect_traces:
        return
    traces_dir = settings.resolved_state_dir / TRACES_DIR
    # (imported here: the OTLP/protobuf decoding is needed only by this setting)
    from coven_codex.traces.receiver import OtlpReceiver  # noqa: PLC0415
    from coven_codex.traces.routing import ThreadRouter  # noqa: PLC0415

    try:
        receiver = await stack.enter_async_context(OtlpReceiver(ThreadRouter(traces_dir)))
    except OSError as exc:
        raise BootstrapError(str(exc)) from None
    owned.update(otel_tables(receiver.target))
    if notice := export_notice(version):
        log.warning("%s", notice)
    log.info("collecting Codex's OpenTelemetry export at %s into %s", receiver.base_url, traces_dir)


def _check_modes(settings: Settings, config: Path) -> None:
    """No mode a chat may choose (``modes``) is wider than the sandbox the daemon's Codex config sets."""
    try:
        sandbox = tomllib.loads(config.read_text("utf-8")).get("sandbox_mode", "workspace-write")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BootstrapError(f"cannot read the Codex config {config}: {exc}") from None
    ceiling = SANDBOX_WIDTH.get(str(sandbox), 0)
    wider = [mode for mode in settings.modes if SANDBOX_WIDTH[MODES[mode].sandbox] > ceiling]
    if wider:
        raise BootstrapError(
            f"modes {', '.join(wider)} would widen the sandbox beyond the Codex config's sandbox_mode = {sandbox!r}; "
            "drop them from modes in coven.toml, or widen sandbox_mode in the Codex base config"
        )


async def _prepare_home(
    settings: Settings,
    workspace: Path,
    driver: DriverKind,
    owned: dict[tuple[str, ...], dict[str, object]],
    env_in: Mapping[str, str],
) -> CodexHome:
    """The isolated ``CODEX_HOME``: the base config, coven's keys and ``owned`` tables; warns without credentials."""
    try:
        home = await asyncio.to_thread(
            prepare_codex_home,
            settings.resolved_codex_home,
            workspace,
            driver=driver,
            base_config=settings.codex_config,
            inline_config=settings.codex,
            owned_tables=owned,
            agents_template=settings.agents_template,
            agents_vars=settings.agents_vars,
            environ=env_in,
        )
    except CodexHomeError as exc:
        raise BootstrapError(str(exc)) from None
    await asyncio.to_thread(_check_modes, settings, home.path / "config.toml")
    if not home.has_credentials:
        log.warning(
            "no Codex credentials found (no auth.json, no API key variable, no model provider "
            "env_key set); Codex will fail with AUTH errors until you run `codex login` or set "
            "an API key"
        )
    return home


def _driver_maker(codex: FoundCodex, home: CodexHome, workspace: Path, settings: Settings) -> DriverMaker:
    """What makes each conversation's driver: Codex as found, started with ``home``'s environment."""
    return DriverMaker(
        plan=codex.plan,
        executable=codex.launch.program,
        command=codex.launch.command,
        version=codex.version,
        env=codex.launch.environment(home.env),
        cwd=workspace,
        settings=settings,
    )


def _daemon(
    settings: Settings,
    journal: Journal,
    maker: DriverMaker,
    *,
    codex_home: Path,
    scope: Scope,
    hooks: Hooks,
    ownership: Ownership | None,
    instruments: Instruments | None,
) -> Daemon:
    """The daemon over everything set up."""

    async def locate(thread_id: str) -> Path:
        return await locate_rollout(codex_home, thread_id=thread_id, cwd=None, timeout=ROLLOUT_LOCATE_TIMEOUT)

    return Daemon(
        settings,
        journal,
        maker,
        locate_rollout=locate,
        codex_home=codex_home,
        conversations=scope.directory,
        on_append=hooks.on_append,
        ownership=ownership,
        prestart=maker.prestart,
        instruments=instruments,
        codex_pids=_pid_counter(maker.pool),
    )


async def _run(
    daemon: Daemon, hold: RedisHold | None, journal: JournalName, stop: asyncio.Event, ready: Ready | None
) -> None:
    """Run ``daemon`` until ``stop`` (keeping the journal's hold); its failures as :class:`BootstrapError`."""
    try:
        async with _kept(hold, describe_journal(journal), daemon):
            await daemon.run(stop, ready)
    except (StateError, JournalError, StorageFailed) as exc:
        raise BootstrapError(str(exc)) from None
    except SingleDaemonServes as exc:  # (joined while starting: the hold was taken after our first heartbeat)
        raise BootstrapError(cluster_refusal(describe_journal(journal), exc.holder)) from None


@contextlib.asynccontextmanager
async def _kept(hold: RedisHold | None, journal: str, daemon: Daemon) -> AsyncIterator[None]:
    """Renew the journal's hold while the daemon runs; lost (another daemon took it over: this one
    stalled past ``lease_time``), the daemon stops the way a storage failure stops it, with one message."""
    if hold is None:
        yield
        return

    async def keep() -> None:
        try:
            await hold.keep(f"the journal {journal}")
        except StorageError as exc:  # HoldLost, or Redis gone for good: the daemon stops, saying so
            daemon.fail(exc)

    task = asyncio.create_task(keep(), name="journal-hold")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _start_webhooks(
    stack: contextlib.AsyncExitStack,
    settings: Settings,
    journal_path: JournalName,
    workspace: Path,
    targets: list[ReadyTarget],
) -> None:
    """The webhook senders on a journal handle of their own (docs/webhooks.md); stopped before the rest."""
    from coven_codex.webhooks.service import webhook_senders  # noqa: PLC0415 (only with [webhooks] in_daemon)

    journal = open_journal(journal_path, JournalOptions(durability=settings.durability, follow_replacement=False))
    stack.push_async_callback(journal.aclose)
    try:
        await stack.enter_async_context(
            webhook_senders(
                journal,
                targets,
                default_cwd=str(workspace),
                # (in a cluster every daemon stands by for each target, and one sends: docs/webhooks.md)
                standby=settings.cluster,
                hold_ttl=settings.lease_time,
            )
        )
    except StateError as exc:
        raise BootstrapError(str(exc)) from None
    log.info("sending turn-complete webhooks to %d target(s)", len(targets))


async def _serve_metrics(
    stack: contextlib.AsyncExitStack, settings: Settings, journal: Journal, codex: Path
) -> MetricsServer | None:
    """Start the ``metrics_port`` server (docs/operations.md) with the journal and Codex checks, if configured."""
    options = settings.metrics
    if options is None:
        return None
    instruments = Instruments()
    server = MetricsServer.of(
        options, instruments, {"journal": journal_reachable(journal, instruments), "codex": codex_found(codex)}
    )
    try:
        return await stack.enter_async_context(server)
    except OSError as exc:
        raise BootstrapError(str(exc)) from None


def daemon_serving(daemon: Daemon) -> ReadinessCheck:
    """Ready once recovery is done and the sessions and ingress run, until shutdown begins."""

    async def check() -> str | None:
        return None if daemon.serving else "the daemon is starting or stopping"

    return check


def codex_found(path: Path) -> ReadinessCheck:
    """Ready while the Codex executable found at start is still there and executable."""

    async def check() -> str | None:
        usable = await asyncio.to_thread(os.access, path, os.X_OK)
        return None if usable else f"the Codex executable {path} is gone or not executable"

    return check


def _pid_counter(pool: AppServerPool | None) -> Callable[[], int] | None:
    """Counts the shared app-servers running now (app-server driver); ``None`` for exec."""
    if pool is None:
        return None
    return lambda: len(pool.pids)


def _webhook_lag(journal: Journal, instruments: Instruments, targets: list[ReadyTarget]) -> Refresh:
    """Each webhook target's journal lag (reader ``webhook <name>``: target names are the operator's): the
    turn ends after its delivered-through cursor, which it has yet to deliver (the entries it reads past,
    its own reports among them, are not owed: counted, they would never come back to 0)."""
    from coven_codex.webhooks.sender import cursor_names  # noqa: PLC0415 (only with [webhooks] in_daemon)
    from coven_codex.webhooks.turns import is_turn_end  # noqa: PLC0415

    async def refresh() -> None:
        for target in targets:
            delivered = await journal.load_cursor(cursor_names(target.name)[0])
            if delivered is None and target.target.start == "beginning":
                delivered = START  # (nothing delivered yet: every entry is still ahead of it)
            if delivered is not None:
                await report_lag(journal, instruments, f"webhook {target.name}", delivered, owed=is_turn_end)

    return refresh
