"""Settings: defaults, overridden by ``coven.toml``, overridden by command-line flags (docs/configuration.md).

All settings live in one pydantic model so that ``run``, ``validate`` and ``spells`` read
them the same way. Out-of-range timeouts are clamped with a warning, not rejected; numbers that
are not finite (``nan``, ``inf``) are rejected, naming the setting, wherever they come from.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from coven_codex.adapters.kit.config import (
    AdapterConfigError,
    AdapterSection,
    AdaptersSettings,
    parse_section,
    resolve_paths,
)
from coven_codex.codex.driver_settings import ModeName
from coven_codex.journal.opening import JournalName, JournalNameSetting, is_redis_name, journal_name
from coven_codex.metrics.options import MetricsSettings
from coven_codex.webhooks.config import WebhooksSettings
from coven_codex.webhooks.config import resolve_paths as resolve_webhook_paths

log = logging.getLogger(__name__)

TURN_TIMEOUT_RANGE = (30.0, 3600.0)
STREAM_IDLE_MIN = 10.0
STATE_APP_DIR = "coven-codex"
CODEX_HOME_DIR = "codex-home"
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def state_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/coven-codex`` (default ``~/.local/state/coven-codex``): outside every workspace."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME", "")
    if not base or not Path(base).is_absolute():  # the XDG spec: a relative value is to be ignored
        base = str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(base) / STATE_APP_DIR


def default_state_dir(workspace: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The default state directory of ``workspace``: ``<state root>/<name>-<hash of its resolved path>``."""
    resolved = workspace.expanduser().resolve()
    digest = hashlib.sha256(str(resolved).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    name = _NAME_UNSAFE.sub("_", resolved.name)[:40].strip("._") or "workspace"
    return state_root(environ) / f"{name}-{digest}"


class SettingsError(ValueError):
    """A settings file or value the user must fix; the message says how."""


class Settings(MetricsSettings):
    """Every setting of the daemon. Field names are the keys of ``coven.toml``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False, allow_inf_nan=False)

    workspace: Path = Field(default_factory=Path.cwd, description="Directory Codex works in.")
    journal: JournalNameSetting | None = Field(
        default=None, description="The chat journal: a JSONL file, or redis://HOST:PORT/DB?key=NAME."
    )
    codex_path: str | None = Field(
        default=None, description="Codex executable: a path, or a bare name looked up on PATH."
    )
    codex_home: Path | None = Field(
        default=None,
        description="Isolated CODEX_HOME; default <state_dir>/codex-home (outside the workspace).",
    )
    codex_config: Path | None = Field(
        default=None, description="The user's base Codex config.toml to copy into CODEX_HOME."
    )
    codex: dict[str, Any] = Field(
        default_factory=dict, description="Inline base Codex config ([codex] table of coven.toml)."
    )
    driver: Literal["auto", "app-server", "exec"] = Field(
        default="auto", description="How thoughts reach Codex; auto picks by version."
    )
    spells: list[str] = Field(default_factory=list, description="Spell sources as module:object.")
    agents_template: Path | None = Field(default=None, description="Template for AGENTS.md with $VARNAME substitution.")
    agents_vars: dict[str, str] = Field(default_factory=dict, description="Values for the template.")
    turn_timeout: float = Field(default=600.0, description="Seconds a turn may run (30-3600).")
    stream_idle_timeout: float = Field(
        default=540.0, description="Seconds without model output before a turn is abandoned."
    )
    kill_grace: float = Field(default=5.0, ge=0.1, le=120.0, description="Seconds between TERM and KILL.")
    max_sessions: int = Field(
        default=8, ge=1, le=256, description="Conversations with a Codex turn running at once, at most."
    )
    max_jobs: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Jobs (conversations named job:<id>) with a Codex turn running at once, at most.",
    )
    workspace_roots: list[Path] = Field(
        default_factory=list,
        description=(
            "Directories, besides the workspace, inside which a conversation may name its working directory (`cwd`)."
        ),
    )
    projects: dict[str, Path] = Field(
        default_factory=dict,
        description="Named directories a chat may choose with /project NAME ([projects] table: name = path); "
        "each inside the workspace or a workspace_roots entry.",
    )
    models: list[str] = Field(
        default_factory=list, description="Models a chat may choose with /model NAME (none: the chat cannot)."
    )
    modes: list[ModeName] = Field(
        default_factory=list,
        description="Modes a chat may choose with /mode NAME: read-only, ask, auto (none: the chat cannot); "
        "none wider than the Codex config's sandbox_mode.",
    )
    app_servers: int = Field(
        default=1, ge=1, le=16, description="Shared `codex app-server` processes (app-server driver)."
    )
    release_thread_after: float = Field(
        default=10.0,
        ge=0.0,
        description="Seconds after its turn an idle conversation lets its Codex thread go (app-server driver).",
    )
    idle_reap: float = Field(
        default=1800.0,
        ge=1.0,
        description="Seconds a shared Codex app-server with no thread is kept before it ends (app-server driver).",
    )
    mid_turn: Literal["queue", "steer"] = Field(
        default="queue", description="What a thought arriving during a running turn does."
    )
    approval_policy: Literal["ask", "approve", "deny"] = Field(
        default="ask", description="How Codex's approval requests are answered by default."
    )
    approval_timeout: float = Field(
        default=300.0, ge=1.0, description="Seconds to wait for an approval answer before denying."
    )
    stream_deltas: bool = Field(default=True, description="Write streaming `delta` entries.")
    durability: Literal["always", "batched", "never"] = Field(default="batched", description="Journal fsync policy.")
    journal_segment_bytes: int | None = Field(
        default=None, ge=1024, description="Roll the file journal over to a new segment at this size (bytes)."
    )
    journal_segment_age: float | None = Field(
        default=None, gt=0, description="Roll the file journal over to a new segment at this age (seconds)."
    )
    journal_retention: Literal["keep", "archive", "delete"] = Field(
        default="keep", description="What becomes of journal segments every cursor has passed."
    )
    journal_archive: Path | None = Field(
        default=None, description="Where archived journal segments go; default <journal>.archive/."
    )
    state_dir: Path | None = Field(
        default=None,
        description="Where session state, the process record and the lock live; default "
        "$XDG_STATE_HOME/coven-codex/<workspace name>-<hash> (~/.local/state/...), outside the workspace.",
    )
    restart_backoff: float = Field(default=1.0, ge=0.0, le=300.0, description="First restart delay.")
    max_attachment_bytes: int = Field(
        default=20 * 1024 * 1024, ge=1, description="Largest image a thought may attach, in bytes."
    )
    max_file_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=1,
        description=(
            "Largest file Codex may send to the chat (with the built-in spell send_file, or an image it"
            " generates), in bytes."
        ),
    )
    send_file: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "Serve the built-in spell send_file (files out to the chat): on, off, or auto (served beside"
            " spells of your own, which Codex already runs an MCP server for). Codex starts the spells' MCP"
            " server, a small process, for every thread it has loaded."
        ),
    )
    collect_traces: bool = Field(
        default=False,
        description="Capture Codex's OpenTelemetry export as JSONL under <state_dir>/traces/, one file per thread.",
    )
    cluster: bool = Field(
        default=False,
        description="Share a Redis journal with other daemons: conversations divided by leases with fencing, "
        "state and rollouts mirrored into Redis (docs/distributed.md).",
    )
    lease_time: float = Field(
        default=10.0,
        ge=1.0,
        le=300.0,
        description="Seconds a daemon's lease on a conversation lasts without renewal (several daemons on "
        "one Redis journal; docs/distributed.md).",
    )
    adapters: AdaptersSettings = Field(
        default_factory=AdaptersSettings,
        description="The chat adapters' sections ([adapters.slack], [adapters.discord]; docs/adapters.md).",
    )
    webhooks: WebhooksSettings = Field(
        default_factory=WebhooksSettings,
        description="Turn-complete webhooks ([webhooks], [[webhooks.targets]]; docs/webhooks.md).",
    )

    @model_validator(mode="after")
    def _clamp_timeouts(self) -> Settings:
        low, high = TURN_TIMEOUT_RANGE
        if not low <= self.turn_timeout <= high:
            clamped = min(max(self.turn_timeout, low), high)
            log.warning("turn_timeout %.0fs is outside %d-%ds; using %.0fs", self.turn_timeout, low, high, clamped)
            self.turn_timeout = clamped
        idle_high = self.turn_timeout - 1
        if not STREAM_IDLE_MIN <= self.stream_idle_timeout <= idle_high:
            clamped = min(max(self.stream_idle_timeout, STREAM_IDLE_MIN), idle_high)
            log.warning(
                "stream_idle_timeout %.0fs is outside %d-%.0fs; using %.0fs",
                self.stream_idle_timeout,
                STREAM_IDLE_MIN,
                idle_high,
                clamped,
            )
            self.stream_idle_timeout = clamped
        return self

    @property
    def resolved_codex_home(self) -> Path:
        """The isolated ``CODEX_HOME``: ``codex_home``, else ``codex-home`` in the state directory."""
        return (self.codex_home or self.resolved_state_dir / CODEX_HOME_DIR).resolve()

    @property
    def cwd_roots(self) -> list[Path]:
        """Where a conversation's ``cwd`` may lie: the daemon's ``workspace``, then every ``workspace_roots``."""
        return [self.workspace, *self.workspace_roots]

    @property
    def resolved_state_dir(self) -> Path:
        """The state directory: ``state_dir``, else :func:`default_state_dir` of the workspace."""
        return (self.state_dir or default_state_dir(self.workspace)).resolve()


PATH_SETTINGS = (
    "workspace",
    "journal",
    "codex_home",
    "codex_config",
    "agents_template",
    "state_dir",
    "journal_archive",
)
"""Settings that name a path: relative ones in a file are relative to it, and ``~`` is expanded."""


def read_settings_file(path: Path) -> dict[str, Any]:
    """Read ``coven.toml`` into a plain dict; relative paths stay relative to the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SettingsError(f"config file {path} does not exist; create it or drop --config") from None
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror}; check its permissions") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    base = path.parent
    for key in PATH_SETTINGS:
        value = data.get(key)
        if isinstance(value, str) and not is_redis_name(value) and not Path(value).expanduser().is_absolute():
            data[key] = str(base / value)
    roots = data.get("workspace_roots")
    if isinstance(roots, list):
        data["workspace_roots"] = [
            str(base / root) if isinstance(root, str) and not Path(root).expanduser().is_absolute() else root
            for root in roots
        ]
    projects = data.get("projects")
    if isinstance(projects, dict):
        data["projects"] = {
            name: str(base / path) if isinstance(path, str) and not Path(path).expanduser().is_absolute() else path
            for name, path in projects.items()
        }
    resolve_paths(data.get("adapters"), base)
    resolve_webhook_paths(data.get("webhooks"), base)
    return data


def _problem(kind: str, loc: tuple[int | str, ...], message: str) -> str:
    """One validation error in the user's words; an unknown key gets the nearest known one."""
    where = ".".join(str(part) for part in loc) or "settings"
    if kind == "extra_forbidden" and len(loc) == 1:
        close = difflib.get_close_matches(str(loc[0]), list(Settings.model_fields), n=1)
        hint = f"; did you mean {close[0]}?" if close else " (docs/configuration.md lists every setting)"
        return f"unknown setting {str(loc[0])[:60]}{hint}"
    return f"{where}: {message}"


def load_settings(config_file: Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Defaults < ``config_file`` < ``overrides`` (flags; ``None`` values are ignored)."""
    data: dict[str, Any] = read_settings_file(config_file) if config_file is not None else {}
    for key, value in (overrides or {}).items():
        if value is not None and value != []:
            data[key] = value
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(err["type"], err["loc"], err["msg"]) for err in exc.errors())
        where = f" in {config_file}" if config_file else ""
        raise SettingsError(f"invalid settings{where}: {problems}") from None
    for name in PATH_SETTINGS:
        value = getattr(settings, name)
        if isinstance(value, Path):
            setattr(settings, name, value.expanduser())
    settings.workspace_roots = [root.expanduser() for root in settings.workspace_roots]
    settings.projects = {name: path.expanduser() for name, path in settings.projects.items()}
    return settings


def load_adapter_section(name: str, config_file: Path) -> tuple[AdapterSection, JournalName | None]:
    """``[adapters.<name>]`` of ``config_file``, and the journal it names (its own, else the top-level one).

    :class:`AdapterConfigError` when the file cannot be read, has no such section, or the section is invalid.
    """
    try:
        raw = read_settings_file(config_file)
    except SettingsError as exc:
        raise AdapterConfigError(str(exc)) from None
    adapters = raw.get("adapters")
    if not isinstance(adapters, dict) or name not in adapters:
        raise AdapterConfigError(
            f"{config_file} has no [adapters.{name}] section; add one (docs/adapters.md shows an example)"
        )
    section = parse_section(name, adapters[name], str(config_file))
    top = raw.get("journal")
    journal = section.journal or (journal_name(top) if isinstance(top, str) else None)
    return section, journal
