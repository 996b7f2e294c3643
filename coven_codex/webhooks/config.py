"""The ``[webhooks]`` table of ``coven.toml`` (docs/webhooks.md): where turn-complete notifications go.

```toml
[webhooks]
in_daemon = true                     # `coven-codex run` sends them (else run `coven-codex webhooks`)

[[webhooks.targets]]
url = "https://ci.example.com/hooks/codex"
secret_env = "COVEN_WEBHOOK_SECRET"  # or secret_file = "/etc/coven/webhook-secret"
```

The shared secret comes only from the environment or a file; one written into ``coven.toml`` is
refused with a message saying where to put it. Loaded, it is a
:class:`~coven_codex.adapters.kit.config.Secret`, never shown in a log line.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coven_codex.support.secret import Secret

DEFAULT_SECRET_ENV = "COVEN_WEBHOOK_SECRET"
MIN_SECRET_CHARS = 16
MAX_NAME_CHARS = 60
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,60}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_SECRET_KEYS = frozenset({"secret", "token", "key", "password", "signing_secret"})


class WebhookConfigError(ValueError):
    """A webhook setting or secret the user must fix; the message says how."""


def check_url(url: str) -> SplitResult:
    """``url`` split, if it is an ``http``/``https`` URL with a host and no user name or password in it;
    else :class:`WebhookConfigError` saying what is wrong."""
    shown = url[:120]
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookConfigError(f"webhook url {shown!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise WebhookConfigError(f"webhook url {shown!r} must start with https:// (or http://)")
    if not parts.hostname:
        raise WebhookConfigError(f"webhook url {shown!r} has no host; write it as https://host/path")
    if "@" in parts.netloc:
        raise WebhookConfigError(
            f"webhook url for host {parts.hostname[:60]} has a user name or password in it; remove it (URLs"
            " reach log lines): the receiver checks the signature made with the shared secret instead"
        )
    if port == 0:
        raise WebhookConfigError(f"webhook url {shown!r} has port 0")
    if any(ch.isspace() for ch in url):
        raise WebhookConfigError(f"webhook url {shown!r} contains white space")
    return parts


def default_name(url: str) -> str:
    """The name of a target that has none: its host and a digest of its URL (stable while the URL is)."""
    host = _UNSAFE.sub("_", urlsplit(url).hostname or "host")[:40]
    return f"{host}-{hashlib.sha256(url.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}"


class WebhookTarget(BaseModel):
    """One ``[[webhooks.targets]]`` entry: a URL every turn's end is posted to."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    url: str = Field(description="Where to POST: an https:// (or http://) URL.")
    name: str | None = Field(
        default=None,
        description="Names the target's saved cursor (webhook <name>); default: its host and a digest of its URL.",
    )
    secret_env: str | None = Field(
        default=None, description=f"Environment variable holding the shared secret (default {DEFAULT_SECRET_ENV})."
    )
    secret_file: Path | None = Field(default=None, description="File holding the shared secret (instead).")
    format: Literal["json", "cloudevents"] = Field(
        default="json", description="json: the payload itself; cloudevents: it as a CloudEvent (structured mode)."
    )
    standard_webhooks: bool = Field(
        default=False,
        description="Also sign in the Standard Webhooks form (webhook-id, webhook-timestamp, webhook-signature).",
    )
    timeout: float = Field(default=10.0, ge=0.1, le=300.0, description="Seconds one attempt may take.")
    max_delay: float = Field(default=300.0, ge=1.0, le=3600.0, description="Longest wait between two attempts.")
    start: Literal["end", "beginning"] = Field(
        default="end", description="First run only: the turns from now on (end), or every turn in the journal."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_secret_literals(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key in _SECRET_KEYS:
                    raise WebhookConfigError(
                        f"[[webhooks.targets]] {str(key)[:40]}: a secret is never written in coven.toml (everyone"
                        f" who can read the file would have it); remove it, then set secret_env ="
                        f' "{DEFAULT_SECRET_ENV}" and export that variable, or secret_file = a file only this'
                        " user can read"
                    )
        return data

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        check_url(value)
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.fullmatch(value):
            raise WebhookConfigError(
                f"webhook name {value[:80]!r}: use 1 to {MAX_NAME_CHARS} letters, digits, '_', '.' or '-'"
            )
        return value

    @property
    def target_name(self) -> str:
        """``name``, else :func:`default_name` of the URL."""
        return self.name or default_name(self.url)

    def secret_source(self) -> tuple[Literal["env", "file"], str]:
        """Where the secret comes from: ``("env", NAME)`` or ``("file", PATH)``."""
        if self.secret_file is not None:
            return "file", str(self.secret_file.expanduser())
        return "env", self.secret_env or DEFAULT_SECRET_ENV

    def load_secret(self, environ: dict[str, str]) -> Secret:
        """Read the shared secret; :class:`WebhookConfigError` says what is wrong (never the value)."""
        how, where = self.secret_source()
        if how == "file":
            try:
                value = Path(where).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise WebhookConfigError(
                    f"cannot read the webhook secret of {self.target_name} from secret_file {where}:"
                    f" {exc.strerror}; check the path and that this user may read it"
                ) from None
            except UnicodeDecodeError:
                raise WebhookConfigError(f"secret_file {where} is not text; put the webhook secret there") from None
            source = f"secret_file {where}"
        else:
            value = environ.get(where, "").strip()
            source = f"the environment variable {where}"
            if not value:
                raise WebhookConfigError(
                    f"the webhook secret of {self.target_name} is missing: set the environment variable {where}"
                    " (the receiver checks each request's signature with it; make one with"
                    " `python3 -c 'import secrets; print(secrets.token_hex(32))'`), or name a file with secret_file"
                )
        if len(value) < MIN_SECRET_CHARS:
            raise WebhookConfigError(
                f"{source} holds a webhook secret of {len(value)} characters; use at least {MIN_SECRET_CHARS}"
                " (`python3 -c 'import secrets; print(secrets.token_hex(32))'` makes one)"
            )
        return Secret(value)


class WebhooksSettings(BaseModel):
    """The ``[webhooks]`` table: the targets, and whether the daemon itself sends to them."""

    model_config = ConfigDict(extra="forbid")

    in_daemon: bool = Field(
        default=False, description="`coven-codex run` sends the webhooks (else run `coven-codex webhooks`)."
    )
    targets: list[WebhookTarget] = Field(default_factory=list, description="Where to POST each turn's end.")

    @model_validator(mode="after")
    def _unique_names(self) -> WebhooksSettings:
        names = [target.target_name for target in self.targets]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise WebhookConfigError(
                f"[[webhooks.targets]] share the name {twice[0]!r} (and so their cursor); give each its own name"
            )
        return self


@dataclass(frozen=True, slots=True)
class ReadyTarget:
    """A target with its URL split and its secret loaded: what the sender needs."""

    target: WebhookTarget
    url: SplitResult
    secret: Secret

    @property
    def name(self) -> str:
        """The target's name (its cursor is ``webhook <name>``)."""
        return self.target.target_name


def ready_targets(targets: list[WebhookTarget], environ: dict[str, str]) -> list[ReadyTarget]:
    """Every target with its secret; :class:`WebhookConfigError` for the first one that cannot be used."""
    return [ReadyTarget(target, check_url(target.url), target.load_secret(environ)) for target in targets]


def resolve_paths(webhooks: Any, base: Path) -> None:
    """Make ``secret_file`` of each ``[[webhooks.targets]]`` (as read from a file in ``base``) relative to it."""
    if not isinstance(webhooks, dict) or not isinstance(webhooks.get("targets"), list):
        return
    for target in webhooks["targets"]:
        if isinstance(target, dict):
            value = target.get("secret_file")
            if isinstance(value, str) and not Path(value).expanduser().is_absolute():
                target["secret_file"] = str(base / value)
