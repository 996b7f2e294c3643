"""docs/webhooks.md says what the code does: settings, headers, payload fields, bounds, the signature check."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import tomllib
from datetime import timedelta
from pathlib import Path

import pytest

from coven_codex.settings import Settings
from coven_codex.support.secret import Secret
from coven_codex.webhooks.config import DEFAULT_SECRET_ENV, WebhooksSettings, WebhookTarget
from coven_codex.webhooks.payload import JSON_TYPE, TurnCompletePayload, request_headers
from coven_codex.webhooks.turns import MAX_CONVERSATIONS, MAX_INPUT_MESSAGES, MAX_MESSAGE_CHARS, STALE_AFTER

DOC = (Path(__file__).resolve().parents[2] / "docs" / "webhooks.md").read_text(encoding="utf-8")


def table_after(heading: str) -> dict[str, str]:
    """First column (backquoted) → second column of the first table after ``heading``."""
    rest = DOC[DOC.index(heading) :]
    table = rest[rest.index("\n|") : rest.index("\n\n", rest.index("\n|"))]
    return dict(re.findall(r"^\| `([^`]+)` \| ([^|]+) \|", table, re.M))


def test_the_settings_tables_list_every_key_with_its_default() -> None:
    assert set(table_after("`[webhooks]`:")) == set(WebhooksSettings.model_fields)
    documented = table_after("Each `[[webhooks.targets]]`:")
    assert set(documented) == set(WebhookTarget.model_fields)
    for name, field in WebhookTarget.model_fields.items():
        if isinstance(field.default, str | float) and name != "secret_env":
            shown = f"{field.default:g}" if isinstance(field.default, float) else f"`{field.default}`"
            assert documented[name].strip() == shown, name
    assert documented["secret_env"].strip() == f"`{DEFAULT_SECRET_ENV}`"


def test_the_examples_are_valid_settings() -> None:
    example = DOC.split("```toml\n", 1)[1].split("```", 1)[0]
    settings = Settings.model_validate(tomllib.loads(example))
    assert settings.webhooks.in_daemon and settings.webhooks.targets


def test_the_payload_table_lists_every_field_as_sent() -> None:
    sent = {alias for alias in TurnCompletePayload.model_json_schema(by_alias=True, mode="serialization")["properties"]}
    assert set(table_after("### The payload")) == sent


def test_the_header_table_lists_every_header_sent() -> None:
    sent = {
        name
        for name, _ in request_headers(Secret("s" * 16), b"{}", "application/json", "k", 1, timestamp=1, standard=True)
    }
    assert set(table_after("| header | value |")) == sent - {"User-Agent"}


def test_the_memory_table_is_the_code() -> None:
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \|$", DOC[DOC.index("## Memory") :], re.M)
    values = [value.strip().split()[0] for _, value in rows[1:5]]
    assert values[:3] == [str(MAX_INPUT_MESSAGES), str(MAX_MESSAGE_CHARS), str(MAX_CONVERSATIONS)]
    assert timedelta(hours=int(values[3])) == STALE_AFTER


def test_the_verification_snippets_and_the_shell_command_check_real_signatures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = DOC.split("```python\n")[1:3]
    namespace: dict[str, object] = {}
    exec(first.split("```", 1)[0], namespace)
    verify = namespace["verify"]
    secret, body = "the-shared-secret-0123456789", b'{"type":"agent-turn-complete","turn-id":"3"}'
    now = int(time.time())
    headers = dict(request_headers(Secret(secret), body, JSON_TYPE, "k:turn-3:end", 1, timestamp=now, standard=True))
    stamp, timed = headers["X-Coven-Timestamp"], headers["X-Coven-Signature-Timed"]
    assert verify(secret.encode(), body, stamp, timed)  # type: ignore[operator]
    assert not verify(secret.encode(), body + b"\n", stamp, timed)  # type: ignore[operator]
    old = dict(request_headers(Secret(secret), body, JSON_TYPE, "k", 1, timestamp=now - 600))
    replayed = (old["X-Coven-Timestamp"], old["X-Coven-Signature-Timed"])
    assert not verify(secret.encode(), body, *replayed)  # type: ignore[operator]
    # The standardwebhooks snippet, on the same request.
    library = {"body": body, "headers": headers, "os": os}
    monkeypatch.setenv("COVEN_WEBHOOK_SECRET", secret)
    exec(second.split("```", 1)[0], library)
    assert library["payload"] == json.loads(body)
    # The shell check.
    command = DOC.split("`$SIG` (`X-Coven-Signature-Timed`):\n\n```\n", 1)[1].split("```", 1)[0]
    (tmp_path / "body.json").write_bytes(body)
    for ts, sig, valid in [(stamp, timed, True), (*replayed, False)]:
        shell = subprocess.run(
            ["sh", "-c", command],
            check=False,
            env={"TS": ts, "SIG": sig, "COVEN_WEBHOOK_SECRET": secret, "PATH": "/usr/bin:/bin"},
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert (shell.stdout.strip() == "valid") is valid, (shell.stdout, shell.stderr)
