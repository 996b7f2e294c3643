"""What the installed Codex offers, and the driver that follows from it.

The driver is chosen by capability, not by version number. ``codex app-server
generate-json-schema --out DIR`` (offered from 0.58 on; 0.47 has no such subcommand) writes the
exact app-server protocol of the installed binary: ``ClientRequest.json`` (the methods a client
may call), ``ServerRequest.json`` (what Codex asks the client, e.g. approvals),
``ServerNotification.json``, and the v2 parameter types (``v2/TurnStartParams.json``,
``v2/TurnSteerParams.json``). :func:`detect_capabilities` runs it once per binary and keeps the
result, a :class:`CodexCapabilities`, in ``<state_dir>/codex-capabilities.json`` keyed by the
binary's path, size and modification time, so later start-ups read one small file.

:func:`plan_driver` decides (docs/rollout.md, "Which driver each Codex version gets"):

- **app-server** when the protocol has every method and notification the driver uses
  (:data:`APP_SERVER_METHODS`, :data:`APP_SERVER_NOTIFICATIONS`) and ``turn/start`` takes
  ``clientUserMessageId``: Codex then records our thought id in the rollout, which is how a
  thought in flight at a crash is known to be received or not, and every release offering it
  records each turn's start and end in the rollout;
- **exec** otherwise (one ``codex exec --json`` per turn, every supported release);
- ``turn/steer`` with ``clientUserMessageId`` → thoughts can join a running turn
  (``mid_turn = "steer"``); ``thread/unsubscribe`` → an idle thread is let go on the shared
  process.

Forcing ``driver = "app-server"`` on a Codex whose protocol lacks any of that is refused with
the missing names; forcing ``exec`` is always allowed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coven_codex.codex.process import pid_running, run_captured
from coven_codex.codex.version import CodexVersion

log = logging.getLogger(__name__)

CAPABILITIES_FILE = "codex-capabilities.json"
"""The cache, in the daemon's state directory (never in the workspace)."""
CACHE_FORMAT = 1
CACHE_ENTRIES = 8
"""Binaries remembered at most (the newest kept): an upgrade adds one."""
SCHEMA_TIMEOUT = 20.0
PROBE_PREFIX = ".capabilities-probe-"
"""The probe's scratch folders in the state directory: ``<prefix><pid>-<random>``, the pid the
prober's. A prober killed mid-probe (``kill -9`` of a starting daemon) leaves its folder (about
5 MB of schema); the next :func:`detect_capabilities` (a start, ``validate``) removes every one
whose prober is gone."""

APP_SERVER_METHODS = ("thread/start", "thread/resume", "turn/start", "turn/interrupt")
"""Client requests the app-server driver cannot do without."""
APP_SERVER_NOTIFICATIONS = ("turn/started", "turn/completed")
"""Notifications the app-server driver follows a turn by."""
CLIENT_ID_FIELD = "clientUserMessageId"
"""The ``turn/start`` (and ``turn/steer``) parameter Codex records as the user message's ``client_id``."""

DriverName = Literal["app-server", "exec"]


class CapabilityError(RuntimeError):
    """The driver asked for cannot run on this Codex; the message says what is missing and what to do."""


class AppServerProtocol(BaseModel):
    """The app-server protocol of one Codex binary, as its ``generate-json-schema`` output says."""

    model_config = ConfigDict(frozen=True)

    client_requests: frozenset[str]
    """Methods a client may call (``ClientRequest.json``)."""
    server_requests: frozenset[str]
    """Requests Codex sends the client (``ServerRequest.json``): approvals and the like."""
    notifications: frozenset[str]
    """Notifications Codex sends (``ServerNotification.json``)."""
    turn_start_fields: frozenset[str]
    """Parameters of ``turn/start`` (``v2/TurnStartParams.json``)."""
    turn_steer_fields: frozenset[str] = frozenset()
    """Parameters of ``turn/steer`` (``v2/TurnSteerParams.json``; empty when there is none)."""

    def missing_for_driver(self) -> list[str]:
        """What the app-server driver needs and this protocol lacks (empty: it suffices)."""
        missing = [m for m in APP_SERVER_METHODS if m not in self.client_requests]
        missing += [f"the {n} notification" for n in APP_SERVER_NOTIFICATIONS if n not in self.notifications]
        if CLIENT_ID_FIELD not in self.turn_start_fields:
            missing.append(f"turn/start's {CLIENT_ID_FIELD}")
        return missing

    @property
    def steer(self) -> bool:
        """``turn/steer`` exists and takes our thought id."""
        return "turn/steer" in self.client_requests and CLIENT_ID_FIELD in self.turn_steer_fields

    @property
    def unsubscribe(self) -> bool:
        """``thread/unsubscribe`` exists: a thread can be let go on a shared process."""
        return "thread/unsubscribe" in self.client_requests

    @property
    def approval_requests(self) -> frozenset[str]:
        """The approval request methods this Codex may send."""
        return frozenset(m for m in self.server_requests if "pproval" in m or m == "mcpServer/elicitation/request")


class CodexCapabilities(BaseModel):
    """What one Codex binary offers (what :func:`plan_driver` decides from)."""

    model_config = ConfigDict(frozen=True)

    version: str
    """``codex --version``'s version, for messages (never for decisions)."""
    app_server: AppServerProtocol | None = None
    """The app-server protocol; ``None`` when the binary could not describe it (see ``why_not``)."""
    why_not: str = ""
    """Why there is no protocol description, e.g. the subcommand does not exist."""
    conclusive: bool = True
    """The binary answered (described its protocol, or refused the subcommand with an exit
    status); ``False`` when the probe itself failed (timed out, killed by a signal, could not
    run): such a result is used for this start only, never cached, so a loaded machine or a
    stray signal cannot pin the exec driver on a Codex that has an app-server."""


class _CacheEntry(BaseModel):
    key: str
    capabilities: CodexCapabilities


class _Cache(BaseModel):
    format: int = CACHE_FORMAT
    entries: list[_CacheEntry] = Field(default_factory=list)


class _MethodEnum(BaseModel):
    enum: list[str] = Field(default_factory=list)


class _MessageProperties(BaseModel):
    method: _MethodEnum = Field(default_factory=_MethodEnum)


class _MessageVariant(BaseModel):
    properties: _MessageProperties = Field(default_factory=_MessageProperties)


class _MessageUnion(BaseModel):
    """``ClientRequest.json`` and its kin: a ``oneOf`` of messages, each naming its ``method`` in an enum."""

    oneOf: list[_MessageVariant] = Field(default_factory=list)

    def methods(self) -> frozenset[str]:
        """Every method named."""
        return frozenset(m for variant in self.oneOf for m in variant.properties.method.enum)


class _ObjectSchema(BaseModel):
    properties: dict[str, object] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DriverPlan:
    """The driver for this Codex and what it may use, with the reason in words."""

    driver: DriverName
    reason: str
    """Why this driver (which capability decided), for the start-up log and ``validate``."""
    steer: bool = False
    """``turn/steer`` with our thought id (app-server)."""
    unsubscribe: bool = False
    """``thread/unsubscribe`` (app-server)."""
    approval_requests: frozenset[str] = frozenset()
    """The approval request methods Codex may send (app-server)."""
    records_client_id: bool = False
    """Codex records our thought id in the rollout (``clientUserMessageId``: app-server), so in-flight
    thoughts resolve by id, not by count."""
    records_turn_end: bool = False
    """The rollout records each turn's start and end, with the turn id the driver reports, so egress
    writes the end and the conversation must not. The app-server plan: every release offering
    ``clientUserMessageId`` (0.140 on) records ``task_started``/``task_complete`` (seen from 0.104 on;
    docs/rollout.md). For exec the conversation writes a turn's end when egress brought none (0.47
    and 0.58 record none)."""
    takes_images: bool = False
    """The driver passes a thought's images to Codex (app-server). Codex 0.47's ``exec --image …
    resume <thread> -`` sent the image without the thought's text (seen with the real CLI), so exec
    refuses them."""
    image_urls: bool = False
    """Images by ``https`` URL as well as local files (app-server)."""
    forks_threads: bool = False
    """A thread opens as a fork of another (``thread/fork``: app-server)."""


def binary_key(program: Path) -> str:
    """What identifies one installed binary in the cache: its resolved path, size and mtime."""
    resolved = program.resolve()
    stat = resolved.stat()
    return f"{resolved}:{stat.st_size}:{stat.st_mtime_ns}"


def read_protocol(folder: Path) -> AppServerProtocol:
    """Parse what ``codex app-server generate-json-schema --out folder`` wrote; ``ValueError`` if unreadable."""

    def union(name: str) -> frozenset[str]:
        return _MessageUnion.model_validate_json((folder / name).read_bytes()).methods()

    def fields(name: str) -> frozenset[str]:
        path = folder / "v2" / name
        if not path.is_file():
            return frozenset()
        return frozenset(_ObjectSchema.model_validate_json(path.read_bytes()).properties)

    try:
        return AppServerProtocol(
            client_requests=union("ClientRequest.json"),
            server_requests=union("ServerRequest.json"),
            notifications=union("ServerNotification.json"),
            turn_start_fields=fields("TurnStartParams.json"),
            turn_steer_fields=fields("TurnSteerParams.json"),
        )
    except (OSError, ValidationError) as exc:
        raise ValueError(f"the app-server schema in {folder} could not be read ({type(exc).__name__})") from None


def probe_capabilities(
    command: Sequence[str],
    version: CodexVersion,
    *,
    env: Mapping[str, str],
    timeout: float = SCHEMA_TIMEOUT,
    scratch_in: Path | None = None,
) -> CodexCapabilities:
    """Run ``<command> app-server generate-json-schema`` in a scratch folder (also the scratch
    ``CODEX_HOME``: the user's Codex directory is never written) and read what it wrote.

    The scratch folder is made in ``scratch_in`` (the state directory, where
    :func:`detect_capabilities` removes the folders of killed probes: :data:`PROBE_PREFIX`), or in
    the system's temporary directory when that is ``None`` or cannot be written."""
    parent = _scratch_parent(scratch_in)
    with tempfile.TemporaryDirectory(prefix=f"{PROBE_PREFIX}{os.getpid()}-", dir=parent) as scratch:
        out = Path(scratch) / "schema"
        try:
            done = run_captured(
                [*command, "app-server", "generate-json-schema", "--out", str(out)],
                env={**env, "CODEX_HOME": scratch},
                timeout=timeout,
                cwd=Path(scratch),
            )
        except subprocess.TimeoutExpired:
            return CodexCapabilities(
                version=str(version),
                why_not=f"`codex app-server generate-json-schema` did not finish within {timeout:.0f}s",
                conclusive=False,
            )
        except OSError as exc:
            return CodexCapabilities(
                version=str(version), why_not=f"could not run Codex ({exc.strerror})", conclusive=False
            )
        if done.returncode < 0:
            return CodexCapabilities(
                version=str(version),
                why_not=f"`codex app-server generate-json-schema` was killed by signal {-done.returncode}",
                conclusive=False,
            )
        if done.returncode != 0:
            said = " ".join(line for line in done.stderr.splitlines()[:1]).strip()[:120]
            return CodexCapabilities(
                version=str(version),
                why_not=f"`codex app-server generate-json-schema` is not offered (exit {done.returncode}: {said})",
            )
        try:
            protocol = read_protocol(out)
        except ValueError as exc:
            return CodexCapabilities(version=str(version), why_not=str(exc))
    return CodexCapabilities(version=str(version), app_server=protocol)


def _scratch_parent(folder: Path | None) -> Path | None:
    """``folder``, made if needed; ``None`` (the system's temporary directory) if it cannot be written."""
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    if not os.access(folder, os.W_OK | os.X_OK):
        return None
    return folder


def remove_abandoned_scratch(folder: Path) -> None:
    """Remove the probe scratch folders in ``folder`` whose prober is no longer running."""
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.name.startswith(PROBE_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name.removeprefix(PROBE_PREFIX).partition("-")[0]
        if pid.isdigit() and not pid_running(int(pid)):
            shutil.rmtree(folder / name, ignore_errors=True)


def detect_capabilities(
    program: Path,
    command: Sequence[str],
    version: CodexVersion,
    *,
    env: Mapping[str, str],
    cache_dir: Path | None,
) -> CodexCapabilities:
    """The capabilities of the binary ``program`` (started by ``command``), from the cache in
    ``cache_dir`` when it knows this binary (same path, size, mtime), else probed and cached."""
    if cache_dir is not None:  # also when the cache answers: a probe killed after another cached
        remove_abandoned_scratch(cache_dir)
    key = binary_key(program)
    cache_path = cache_dir / CAPABILITIES_FILE if cache_dir is not None else None
    cache = _load_cache(cache_path)
    for entry in cache.entries:
        if entry.key == key:
            return entry.capabilities
    capabilities = probe_capabilities(command, version, env=env, scratch_in=cache_dir)
    if not capabilities.conclusive:
        log.warning(
            "could not learn what Codex %s offers (%s); using what that leaves for this start only,"
            " and probing again at the next start",
            version,
            capabilities.why_not,
        )
        return capabilities
    if cache_path is not None:
        kept = [entry for entry in cache.entries if entry.key != key][-(CACHE_ENTRIES - 1) :]
        _store_cache(cache_path, _Cache(entries=[*kept, _CacheEntry(key=key, capabilities=capabilities)]))
    return capabilities


def _load_cache(path: Path | None) -> _Cache:
    if path is None:
        return _Cache()
    try:
        cache = _Cache.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return _Cache()
    except (OSError, ValidationError) as exc:
        log.info("ignoring the Codex capability cache %s (%s); probing again", path, type(exc).__name__)
        return _Cache()
    return cache if cache.format == CACHE_FORMAT else _Cache()


def _store_cache(path: Path, cache: _Cache) -> None:
    """Write the cache atomically (a temp file renamed over it); a failure only costs a probe next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".capabilities-", delete=False) as handle:
            handle.write(cache.model_dump_json(indent=1))
        os.replace(handle.name, path)
    except OSError as exc:
        log.warning("could not save the Codex capability cache %s (%s); it is probed again next start", path, exc)


def plan_driver(capabilities: CodexCapabilities, choice: Literal["auto", "app-server", "exec"] = "auto") -> DriverPlan:
    """The driver for ``capabilities`` and the ``driver`` setting (module docstring); raises
    :class:`CapabilityError` when ``app-server`` is forced on a Codex whose protocol does not suffice."""
    protocol = capabilities.app_server
    if protocol is None:
        why = f"Codex {capabilities.version} does not describe an app-server protocol ({capabilities.why_not})"
    else:
        missing = protocol.missing_for_driver()
        why = f"Codex {capabilities.version}'s app-server lacks {', '.join(missing)}" if missing else ""
    if choice == "app-server" and why:
        raise CapabilityError(
            f'driver = "app-server" was asked for, but {why}; set driver = "auto" (or "exec"), or upgrade Codex'
        )
    if choice == "exec":
        return DriverPlan("exec", 'exec, as configured (driver = "exec")')
    if protocol is None or why:
        return DriverPlan("exec", f"exec: {why}")
    how = "as configured" if choice == "app-server" else "its protocol has everything the driver uses"
    extras = ["turn/steer" if protocol.steer else "no turn/steer with client ids (no steering)"]
    if not protocol.unsubscribe:
        extras.append("no thread/unsubscribe (idle threads stay loaded)")
    return DriverPlan(
        "app-server",
        f"app-server: {how} (thread/start, thread/resume, turn/start with {CLIENT_ID_FIELD}, "
        f"turn/interrupt, turn/started, turn/completed; {', '.join(extras)})",
        steer=protocol.steer,
        unsubscribe=protocol.unsubscribe,
        approval_requests=protocol.approval_requests,
        records_client_id=True,
        records_turn_end=True,
        takes_images=True,
        image_urls=True,
        forks_threads=True,
    )
