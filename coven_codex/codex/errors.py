"""Classifying Codex failures into codes the chat can act on (docs/operations.md, Error codes in the chat).

First match wins; exit codes are looked at before text. Each code carries a hint
that tells the user what to do.

How a Codex process ended is classified here too, once, for the drivers and the app-server layer
alike (:func:`process_error`, :func:`killed_from_outside`, :func:`collect_stderr`, :class:`DriverError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 200


class ErrorCode(StrEnum):
    """The codes a Codex failure is classified into (docs/operations.md, Error codes in the chat)."""

    OUTER_TIMEOUT = "OUTER_TIMEOUT"
    KILL_TIMEOUT = "KILL_TIMEOUT"
    AUTH = "AUTH"
    RATE_LIMIT = "RATE_LIMIT"
    MODEL = "MODEL"
    NETWORK = "NETWORK"
    STREAM_IDLE = "STREAM_IDLE"
    QUOTA = "QUOTA"
    CONTEXT_LENGTH = "CONTEXT_LENGTH"
    PROVIDER_ERROR = "PROVIDER_ERROR"
    SANDBOX = "SANDBOX"
    VERSION = "VERSION"
    PROCESS_EXITED = "PROCESS_EXITED"
    UNKNOWN = "UNKNOWN"


HINTS: dict[ErrorCode, str] = {
    ErrorCode.OUTER_TIMEOUT: "The turn ran longer than the turn timeout; raise turn_timeout in coven.toml "
    "or ask for a smaller step.",
    ErrorCode.KILL_TIMEOUT: "Codex was killed after it did not stop in time; the session will resume. "
    "If this repeats, check the machine's load and raise kill_grace.",
    ErrorCode.AUTH: "Codex could not authenticate: run `codex login` (or set the API key variable your "
    "model provider's env_key names), then `coven-codex validate`.",
    ErrorCode.RATE_LIMIT: "The model provider is rate-limiting requests; wait a minute and send the "
    "thought again, or lower the number of concurrent sessions.",
    ErrorCode.MODEL: "The configured model does not exist or is not available to this account; fix "
    "`model` in the Codex base config.",
    ErrorCode.NETWORK: "Codex could not reach the model provider; check the network, proxy and the "
    "provider's base_url.",
    ErrorCode.STREAM_IDLE: "The model stopped streaming; the turn was abandoned. Send the thought again; "
    "raise stream_idle_timeout if the model is slow.",
    ErrorCode.QUOTA: "The account is out of quota or credit; add credit or switch account.",
    ErrorCode.CONTEXT_LENGTH: "The conversation no longer fits the model's context; start a new "
    "conversation or ask Codex to summarise.",
    ErrorCode.PROVIDER_ERROR: "The model provider answered the request with an error (a failed response or "
    "a server error); send the thought again, and if it repeats check the provider's status and its base_url.",
    ErrorCode.SANDBOX: "Codex's sandbox refused an action; widen sandbox_mode in the Codex base config "
    "if the action is wanted.",
    ErrorCode.VERSION: "This Codex CLI version is too old or too new; install a supported version "
    "(see `coven-codex validate`).",
    ErrorCode.PROCESS_EXITED: "The Codex process ended unexpectedly; the session will be resumed. "
    "Run `coven-codex validate` if this repeats.",
    ErrorCode.UNKNOWN: "Codex reported an error; see the daemon log for details and run `coven-codex validate`.",
}

_TEXT_RULES: tuple[tuple[ErrorCode, re.Pattern[str]], ...] = (
    (
        ErrorCode.AUTH,
        re.compile(
            r"not (?:authenticated|logged in)|auth(?:entication)? fail|\b401\b|unauthori[sz]ed"
            r"|invalid api key|incorrect api key|missing api key|login required",
            re.I,
        ),
    ),
    (ErrorCode.RATE_LIMIT, re.compile(r"rate.?limit|\b429\b|too many requests", re.I)),
    (
        ErrorCode.MODEL,
        re.compile(r"model[_ ]not[_ ]found|invalid model|model .*does not exist|unknown model", re.I),
    ),
    (
        ErrorCode.NETWORK,
        re.compile(
            r"network|connection (?:refused|reset|closed|error)|error sending request|dns|"
            r"could not connect|failed to connect|timed out connecting",
            re.I,
        ),
    ),
    # Codex words a provider's `response.failed` as "stream disconnected before completion: <the
    # provider's message>", and its own stream failures the same way with its own words after the
    # colon (an idle timeout, the stream ending early), or none in its retry notices.
    (
        ErrorCode.STREAM_IDLE,
        re.compile(
            r"stream.{0,20}idle|idle.{0,20}stream|idle timeout|stream closed before"
            r"|stream disconnected before completion(?!: )",
            re.I,
        ),
    ),
    (ErrorCode.QUOTA, re.compile(r"quota|\b402\b|insufficient.?credit|billing", re.I)),
    (
        ErrorCode.CONTEXT_LENGTH,
        re.compile(r"context.?(?:length|window)|too many tokens|maximum context", re.I),
    ),
    (
        ErrorCode.PROVIDER_ERROR,
        re.compile(
            r"stream disconnected before completion: |response\.failed|internal.?server.?error|server.?error"
            r"|\b50[0-4]\b|bad gateway|service unavailable|gateway timeout|overloaded|high demand",
            re.I,
        ),
    ),
    (ErrorCode.SANDBOX, re.compile(r"sandbox|permission denied", re.I)),
    (ErrorCode.VERSION, re.compile(r"\bversion\b|upgrade|deprecated", re.I)),
)


@dataclass(frozen=True, slots=True)
class ClassifiedError:
    """A Codex failure: its code, a shortened message and a hint saying what to do."""

    code: ErrorCode
    message: str
    hint: str


def classify(message: str, exit_code: int | None = None) -> ClassifiedError:
    """Classify a Codex failure by exit code, then by message text."""
    code = ErrorCode.UNKNOWN
    if exit_code == 124:
        code = ErrorCode.OUTER_TIMEOUT
    elif exit_code == 137:
        code = ErrorCode.KILL_TIMEOUT
    else:
        for candidate, pattern in _TEXT_RULES:
            if pattern.search(message):
                code = candidate
                break
    return ClassifiedError(code=code, message=shorten(message), hint=HINTS[code])


def shorten(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """Collapse whitespace and cut to ``limit`` characters (with an ellipsis)."""
    flat = " ".join(message.split())
    if len(flat) <= limit:
        return flat
    return flat[: limit - 1] + "…"


# -- process exits: how a Codex process ended, for the drivers and the app-server layer alike -------
STDERR_LINES = 20
"""How many of a Codex process's last stderr lines are kept to explain its end."""
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class DriverError(RuntimeError):
    """A driver call that cannot be served (not started, dead, unknown approval, ...)."""

    def __init__(self, message: str, *, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode
        """The Codex process's exit status when its end is why (see :func:`killed_from_outside`)."""


def describe_exit(returncode: int | None) -> str:
    """A process's end for messages: ``exit N``, ``killed by signal N`` or ``still running``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exit {returncode}"


OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals that end Codex from outside (an operator, the OOM killer), unlike a crash (SIGSEGV, SIGABRT)."""


def killed_from_outside(returncode: int | None) -> bool:
    """Codex ended by one of :data:`OUTSIDE_SIGNALS`: a thought being handed over is not to blame."""
    return returncode is not None and returncode < 0 and -returncode in OUTSIDE_SIGNALS


def process_error(returncode: int | None, stderr_lines: Sequence[str], *, what: str = "Codex") -> ClassifiedError:
    """Classify an unexpected process end.

    A process killed by a signal is ``PROCESS_EXITED``. Otherwise its last *error* lines on
    stderr (Codex logs warnings there too, e.g. about the sandbox, which must not decide the
    code) are classified; when they say nothing known, it is ``PROCESS_EXITED`` as well.
    """
    detail = f"{what} exited unexpectedly ({describe_exit(returncode)})"
    errors = [line for line in stderr_lines if _ERROR_LINE.search(line) and not _WARNING_LINE.search(line)]
    tail = " | ".join(errors[-2:])
    if tail and (returncode is None or returncode > 0):
        by_text = classify(tail)
        if by_text.code is not ErrorCode.UNKNOWN:
            return by_text
    if tail:
        detail = f"{detail}: {tail}"
    return ClassifiedError(ErrorCode.PROCESS_EXITED, shorten(detail), HINTS[ErrorCode.PROCESS_EXITED])


_ERROR_LINE = re.compile(r"\berror\b|\bfatal\b|panicked", re.I)
_WARNING_LINE = re.compile(r"^\s*(?:WARNING|WARN)\b|\sWARN\s", re.I)


async def collect_stderr(stream: asyncio.StreamReader | None, into: deque[str], label: str) -> None:
    """Keep the last lines a Codex process writes on stderr in ``into`` (they explain its end); log them."""
    if stream is None:
        return
    with contextlib.suppress(ConnectionError, ValueError):
        while line := await stream.readline():
            text = ANSI.sub("", line.decode("utf-8", "replace")).strip()
            if text:
                into.append(text[:400])
                log.debug("%s stderr: %s", label, text[:400])
