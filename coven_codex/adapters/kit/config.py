"""The chat adapters' configuration: one typed section per adapter in ``coven.toml`` (docs/adapters.md).

```toml
[adapters.slack]
token_env = "SLACK_BOT_TOKEN"        # or token_file = "/etc/coven/slack-bot-token"
app_token_env = "SLACK_APP_TOKEN"    # Socket Mode (the default); HTTP mode takes signing_secret_env
allow_users = ["U0123ABCD"]
allow_groups = ["S0456EFGH"]         # Slack user groups (Discord: roles)
allow_channels = ["C0789IJKL"]       # absent: every channel the bot is in
admins = ["U0123ABCD"]
per_user_channels = ["C0789IJKL"]    # every user gets a Codex session of their own there
edit_interval = 1.2
```

Tokens come only from the environment (``*_env``) or a file (``*_file``); a token written into the
file itself is refused with a message saying where to put it instead. A loaded token is a
:class:`Secret`, whose ``repr`` and ``str`` never show the value (so it never reaches a log line).
:meth:`AdapterSection.load_secrets` reads and checks every token the adapter needs
(present, well-formed, :class:`SecretKind`), raising :class:`AdapterConfigError` with what to do;
``coven-codex validate`` runs the same checks (``coven_codex/validate/adapter_probes.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coven_codex.adapters.kit.access import ADMIN_COMMANDS, AccessPolicy
from coven_codex.adapters.kit.mapping import ChannelMap, SessionScope
from coven_codex.adapters.kit.render import RenderMode, RenderOptions
from coven_codex.adapters.kit.runner import RunnerOptions
from coven_codex.adapters.kit.threads import ContextLimits
from coven_codex.journal.opening import JournalNameSetting, is_redis_name
from coven_codex.metrics.options import MetricsSettings
from coven_codex.support.secret import Secret


class AdapterConfigError(ValueError):
    """An adapter's configuration or token the user must fix; the message says how."""


@dataclass(frozen=True, slots=True)
class SecretKind:
    """What one token is: its name in messages, its shape, and where the user gets it."""

    what: str
    """``the Slack bot token``"""
    shape: re.Pattern[str]
    shape_hint: str
    """What a well-formed one looks like, for the message when it does not."""
    where: str
    """Where to get it."""

    def check(self, value: str, source: str) -> Secret:
        """``value`` as a :class:`Secret`, or :class:`AdapterConfigError` naming ``source`` (never the value)."""
        if not value:
            raise AdapterConfigError(f"{source} is empty; put {self.what} there ({self.where})")
        if not self.shape.fullmatch(value):
            raise AdapterConfigError(
                f"{source} does not hold {self.what} ({self.shape_hint}); copy it again ({self.where})"
            )
        return Secret(value)


SLACK_BOT_TOKEN = SecretKind(
    "the Slack bot token",
    re.compile(r"xoxb-[A-Za-z0-9-]{10,}"),
    "it starts with xoxb-",
    "api.slack.com/apps > your app > OAuth & Permissions > Bot User OAuth Token",
)
SLACK_APP_TOKEN = SecretKind(
    "the Slack app-level token",
    re.compile(r"xapp-[A-Za-z0-9-]{10,}"),
    "it starts with xapp-",
    "api.slack.com/apps > your app > Basic Information > App-Level Tokens, scope connections:write",
)
SLACK_SIGNING_SECRET = SecretKind(
    "the Slack signing secret",
    re.compile(r"[0-9a-f]{32}"),
    "32 hexadecimal digits",
    "api.slack.com/apps > your app > Basic Information > App Credentials > Signing Secret",
)
DISCORD_BOT_TOKEN = SecretKind(
    "the Discord bot token",
    re.compile(r"[A-Za-z0-9_\-]{20,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{20,}"),
    "three dot-separated parts",
    "discord.com/developers/applications > your application > Bot > Reset Token",
)
TELEGRAM_BOT_TOKEN = SecretKind(
    "the Telegram bot token",
    re.compile(r"[0-9]{5,16}:[A-Za-z0-9_\-]{30,}"),
    "the bot's numeric id, a colon, then 35 letters, digits, - and _",
    "Telegram: @BotFather > /mybots > your bot > API Token",
)

TELEGRAM_WEBHOOK_SECRET = SecretKind(
    "the Telegram webhook secret",
    re.compile(r"[A-Za-z0-9_\-]{16,256}"),
    "16 to 256 letters, digits, - and _",
    "make one, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'",
)

_LITERAL_SHAPES = (SLACK_BOT_TOKEN, SLACK_APP_TOKEN, DISCORD_BOT_TOKEN, TELEGRAM_BOT_TOKEN)
_LITERAL_KEYS = frozenset({"token", "bot_token", "app_token", "signing_secret", "secret", "password", "api_key"})


def _refuse_literals(section: str, data: dict[str, Any], default_env: dict[str, str]) -> None:
    """A token written into ``coven.toml`` (under any key) is refused, naming the key, never the value."""
    for key, value in data.items():
        looks_like_token = isinstance(value, str) and any(kind.shape.search(value) for kind in _LITERAL_SHAPES)
        if key in _LITERAL_KEYS or looks_like_token:
            prefix = key.removesuffix("_env").removesuffix("_file") if key not in _LITERAL_KEYS else key
            prefix = prefix if prefix in default_env else next(iter(default_env), "token")
            raise AdapterConfigError(
                f"[adapters.{section}] {key[:40]}: a token is never written in coven.toml (everyone who can"
                f" read the file would have it); remove it, then set {prefix}_env ="
                f' "{default_env.get(prefix, "TOKEN")}" and export that variable, or {prefix}_file = a file'
                " only this user can read"
            )


class AdapterSection(MetricsSettings):
    """What every adapter's section has: token sources, access lists, session mode, edit interval."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    PLATFORM: ClassVar[str] = ""
    LIBRARY: ClassVar[str] = ""
    """The module the adapter needs (checked by ``validate``)."""
    EXTRA: ClassVar[str] = ""
    """The pip extra that installs it."""
    SECRETS: ClassVar[dict[str, SecretKind]] = {}
    """The tokens the adapter needs: the field prefix (``token`` → ``token_env``/``token_file``) → kind."""
    DEFAULT_ENV: ClassVar[dict[str, str]] = {}

    token_env: str | None = Field(default=None, description="Environment variable holding the bot token.")
    token_file: Path | None = Field(default=None, description="File holding the bot token (instead of token_env).")
    journal: JournalNameSetting | None = Field(default=None, description="The journal; default: the top-level journal.")
    allow_users: list[str] = Field(default_factory=list, description="User ids allowed to talk to Codex.")
    allow_groups: list[str] = Field(
        default_factory=list, description="Group ids (Slack user groups, Discord roles) whose members are allowed."
    )
    allow_channels: list[str] | None = Field(
        default=None, description="Channel ids the bot answers in; absent: every channel it is in."
    )
    admins: list[str] = Field(default_factory=list, description="User ids allowed to run the admin commands.")
    admin_commands: list[str] = Field(
        default_factory=lambda: sorted(ADMIN_COMMANDS), description="Commands only admins may run."
    )
    session: SessionScope = Field(
        default="shared", description="shared: one Codex session per thread; per_user: one per user and thread."
    )
    per_user_channels: list[str] = Field(
        default_factory=list, description="Channel ids where every user gets a session of their own."
    )
    edit_interval: float = Field(default=1.0, ge=0.2, le=60.0, description="Least seconds between edits.")
    render: RenderMode = Field(
        default=RenderMode.QUIET,
        description="quiet: a progress card per turn, then the reply; verbose: every step a message of its own.",
    )
    reasoning: bool = Field(default=False, description="Show Codex's reasoning summaries (a card line when quiet).")

    @model_validator(mode="before")
    @classmethod
    def _no_token_literals(cls, data: Any) -> Any:
        if isinstance(data, dict):
            _refuse_literals(cls.PLATFORM, data, cls.DEFAULT_ENV)
        return data

    def access_policy(self) -> AccessPolicy:
        """The allow-lists as the kit's :class:`AccessPolicy`."""
        return AccessPolicy(
            users=frozenset(self.allow_users),
            channels=None if self.allow_channels is None else frozenset(self.allow_channels),
            roles=frozenset(self.allow_groups),
            admins=frozenset(self.admins),
            admin_commands=frozenset(self.admin_commands),
        )

    def runner_options(self) -> RunnerOptions:
        """How the kit's runner renders for this adapter (``render``, ``reasoning``)."""
        return RunnerOptions(render=RenderOptions(show_reasoning=self.reasoning, mode=self.render))

    def channel_map(self) -> ChannelMap:
        """The conversation naming for this adapter (session mode per channel)."""
        return ChannelMap(self.PLATFORM, per_user=frozenset(self.per_user_channels), default_scope=self.session)

    def access_problems(self) -> list[str]:
        """What makes the allow-lists useless (nobody allowed, no channel), as messages with the fix."""
        problems: list[str] = []
        if not self.allow_users and not self.allow_groups:
            problems.append(
                f"[adapters.{self.PLATFORM}] allows nobody: list user ids in allow_users (or group ids in allow_groups)"
            )
        if self.allow_channels == []:
            problems.append(
                f"[adapters.{self.PLATFORM}] allow_channels is empty: list channel ids, or remove the key to"
                " answer in every channel the bot is in"
            )
        return problems

    def needed_secrets(self) -> dict[str, SecretKind]:
        """The tokens this configuration needs (a mode may need fewer than :attr:`SECRETS`)."""
        return dict(self.SECRETS)

    def secret_source(self, prefix: str) -> tuple[str, str | Path]:
        """Where token ``prefix`` comes from: ``("env", NAME)`` or ``("file", PATH)``."""
        path = getattr(self, f"{prefix}_file")
        if path is not None:
            return "file", Path(path).expanduser()
        return "env", getattr(self, f"{prefix}_env") or self.DEFAULT_ENV[prefix]

    def load_secret(self, prefix: str, environ: dict[str, str]) -> Secret:
        """Read and check token ``prefix``; :class:`AdapterConfigError` says what is wrong and what to do."""
        kind = self.SECRETS[prefix]
        how, where = self.secret_source(prefix)
        if how == "file":
            try:
                value = Path(where).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise AdapterConfigError(
                    f"cannot read {kind.what} from {prefix}_file {where}: {exc.strerror}; check the path"
                    " and that this user may read it"
                ) from None
            except UnicodeDecodeError:
                raise AdapterConfigError(f"{prefix}_file {where} is not text; put {kind.what} there") from None
            return kind.check(value, f"{prefix}_file {where}")
        value = environ.get(str(where), "").strip()
        if not value:
            raise AdapterConfigError(
                f"{kind.what} is missing: set the environment variable {where} ({kind.where}),"
                f" or name a file with {prefix}_file in [adapters.{self.PLATFORM}]"
            )
        return kind.check(value, f"the environment variable {where}")

    def load_secrets(self, environ: dict[str, str]) -> dict[str, Secret]:
        """Every token :meth:`needed_secrets` names, read and checked."""
        return {prefix: self.load_secret(prefix, environ) for prefix in self.needed_secrets()}


class SlackSection(AdapterSection):
    """``[adapters.slack]``: Socket Mode (an app-level token) by default, or HTTP events (a signing secret)."""

    PLATFORM: ClassVar[str] = "slack"
    LIBRARY: ClassVar[str] = "slack_bolt"
    EXTRA: ClassVar[str] = "slack"
    SECRETS: ClassVar[dict[str, SecretKind]] = {
        "token": SLACK_BOT_TOKEN,
        "app_token": SLACK_APP_TOKEN,
        "signing_secret": SLACK_SIGNING_SECRET,
    }
    DEFAULT_ENV: ClassVar[dict[str, str]] = {
        "token": "SLACK_BOT_TOKEN",
        "app_token": "SLACK_APP_TOKEN",
        "signing_secret": "SLACK_SIGNING_SECRET",
    }

    mode: Literal["socket", "http"] = Field(
        default="socket", description="socket: Socket Mode (no public URL); http: Slack posts events to us."
    )
    app_token_env: str | None = Field(default=None, description="Environment variable of the app-level token.")
    app_token_file: Path | None = Field(default=None, description="File holding the app-level token.")
    signing_secret_env: str | None = Field(default=None, description="Environment variable of the signing secret.")
    signing_secret_file: Path | None = Field(default=None, description="File holding the signing secret.")
    http_host: str = Field(default="127.0.0.1", description="HTTP mode: address to listen on.")
    http_port: int = Field(default=3000, ge=0, le=65535, description="HTTP mode: port to listen on.")
    api_url: str | None = Field(
        default=None, description="Slack's Web API base URL (default https://slack.com/api/; GovSlack differs)."
    )
    edit_interval: float = Field(default=1.2, ge=0.2, le=60.0, description="Least seconds between edits.")
    post_rate: float = Field(
        default=1.0,
        gt=0.0,
        le=100.0,
        description="chat.postMessage calls a second per channel (Slack documents about 1, short bursts allowed).",
    )
    context_messages: int = Field(
        default=20,
        ge=0,
        le=200,
        description="Earlier messages of a thread the first mention there carries as context (0: none).",
    )
    context_chars: int = Field(
        default=8000,
        ge=0,
        le=100_000,
        description="Characters of those earlier messages at most, all together (the newest are kept).",
    )

    def context_limits(self) -> ContextLimits:
        """How much of a thread's earlier messages the first mention there carries."""
        return ContextLimits(messages=self.context_messages, chars=self.context_chars)

    def needed_secrets(self) -> dict[str, SecretKind]:
        """The bot token, and the app-level token (Socket Mode) or the signing secret (HTTP)."""
        other = "app_token" if self.mode == "socket" else "signing_secret"
        return {"token": SLACK_BOT_TOKEN, other: self.SECRETS[other]}


class DiscordSection(AdapterSection):
    """``[adapters.discord]``: the bot token, allow-lists, and channels where every message goes to Codex."""

    PLATFORM: ClassVar[str] = "discord"
    LIBRARY: ClassVar[str] = "discord"
    EXTRA: ClassVar[str] = "discord"
    SECRETS: ClassVar[dict[str, SecretKind]] = {"token": DISCORD_BOT_TOKEN}
    DEFAULT_ENV: ClassVar[dict[str, str]] = {"token": "DISCORD_BOT_TOKEN"}

    listen_channels: list[str] = Field(
        default_factory=list, description="Channel ids where every message (not only mentions) goes to Codex."
    )
    thread_channels: list[str] = Field(
        default_factory=list,
        description="Channel ids where each mention starts a Discord thread of its own, which is its conversation.",
    )

    def access_problems(self) -> list[str]:
        """The common problems, and listen/thread channels that ``allow_channels`` leaves out (never answered)."""
        problems = super().access_problems()
        if self.allow_channels:
            for key in ("listen_channels", "thread_channels"):
                outside = sorted(set(getattr(self, key)) - set(self.allow_channels))
                if outside:
                    problems.append(
                        f"[adapters.discord] {key} names channels that allow_channels leaves out"
                        f" ({', '.join(channel[:32] for channel in outside[:5])}): add them to allow_channels"
                        " or remove them"
                    )
        return problems


class TelegramSection(AdapterSection):
    """``[adapters.telegram]``: the bot token, allow-lists (user and chat ids), budgets, long polling."""

    PLATFORM: ClassVar[str] = "telegram"
    LIBRARY: ClassVar[str] = "telegram"
    EXTRA: ClassVar[str] = "telegram"
    SECRETS: ClassVar[dict[str, SecretKind]] = {"token": TELEGRAM_BOT_TOKEN, "webhook_secret": TELEGRAM_WEBHOOK_SECRET}
    DEFAULT_ENV: ClassVar[dict[str, str]] = {
        "token": "TELEGRAM_BOT_TOKEN",
        "webhook_secret": "TELEGRAM_WEBHOOK_SECRET",
    }

    mode: Literal["polling", "webhook"] = Field(
        default="polling", description="polling: getUpdates (no public URL); webhook: Telegram posts updates to us."
    )
    webhook_url: str | None = Field(
        default=None, description="Webhook mode: the public HTTPS URL Telegram posts to (a reverse proxy's)."
    )
    webhook_host: str = Field(default="127.0.0.1", description="Webhook mode: address to listen on.")
    webhook_port: int = Field(default=8443, ge=0, le=65535, description="Webhook mode: port to listen on.")
    webhook_secret_env: str | None = Field(
        default=None, description="Webhook mode: environment variable of the secret Telegram sends back."
    )
    webhook_secret_file: Path | None = Field(default=None, description="Webhook mode: file holding that secret.")

    listen_chats: list[str] = Field(
        default_factory=list,
        description="Group chat ids where every message (not only mentions and replies to the bot) goes to Codex.",
    )
    message_limit: int = Field(
        default=4000,
        ge=500,
        le=4000,
        description="Markdown characters per message before it is split (Telegram shows at most 4,096).",
    )
    edit_interval: float = Field(default=1.5, ge=0.2, le=60.0, description="Least seconds between edits.")
    chat_per_minute: float = Field(
        default=60.0, gt=0, description="Messages and edits per minute in one private chat (Telegram: about 1/s)."
    )
    group_per_minute: float = Field(
        default=20.0, gt=0, description="Messages and edits per minute in one group (Telegram: 20/min)."
    )
    global_per_second: float = Field(
        default=30.0, gt=0, description="Messages and edits per second over all chats (Telegram: about 30/s)."
    )
    poll_timeout: int = Field(default=30, ge=1, le=50, description="Seconds one getUpdates long poll waits.")
    api_url: str | None = Field(
        default=None, description="The Bot API's base URL (default https://api.telegram.org; a local Bot API server)."
    )

    @model_validator(mode="after")
    def _webhook_needs_url(self) -> TelegramSection:
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError('mode = "webhook" needs webhook_url, the public HTTPS URL Telegram posts updates to')
        return self

    def needed_secrets(self) -> dict[str, SecretKind]:
        """The bot token, and in webhook mode the secret Telegram sends with every update."""
        if self.mode == "webhook":
            return dict(self.SECRETS)
        return {"token": TELEGRAM_BOT_TOKEN}


class AdaptersSettings(BaseModel):
    """The ``[adapters]`` table of ``coven.toml``: a section per configured adapter."""

    model_config = ConfigDict(extra="forbid")

    slack: SlackSection | None = None
    discord: DiscordSection | None = None
    telegram: TelegramSection | None = None

    def configured(self) -> list[AdapterSection]:
        """The sections present, in a fixed order."""
        return [section for section in (self.slack, self.discord, self.telegram) if section is not None]


SECTIONS: dict[str, type[AdapterSection]] = {
    "slack": SlackSection,
    "discord": DiscordSection,
    "telegram": TelegramSection,
}
"""Every adapter that has a section, by its name in ``[adapters.<name>]``."""

_PATH_KEYS = ("journal", "token_file", "app_token_file", "signing_secret_file", "webhook_secret_file")


def resolve_paths(adapters: Any, base: Path) -> None:
    """Make the relative paths of ``[adapters.*]`` (as read from a file in ``base``) relative to that file."""
    if not isinstance(adapters, dict):
        return
    for section in adapters.values():
        if not isinstance(section, dict):
            continue
        for key in _PATH_KEYS:
            value = section.get(key)
            if isinstance(value, str) and not is_redis_name(value) and not Path(value).expanduser().is_absolute():
                section[key] = str(base / value)


def parse_section(name: str, data: Any, origin: str = "coven.toml") -> AdapterSection:
    """Validate ``[adapters.<name>]``; :class:`AdapterConfigError` names each bad key."""
    model = SECTIONS[name]
    try:
        return model.model_validate(data if data is not None else {})
    except AdapterConfigError:
        raise
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            cause = error.get("ctx", {}).get("error")
            if isinstance(cause, AdapterConfigError):
                raise cause from None
            where = ".".join(str(part) for part in error["loc"])
            problems.append(f"{where}: {error['msg']}" if where else error["msg"])
        raise AdapterConfigError(f"invalid [adapters.{name}] in {origin}: {'; '.join(problems)}") from None
