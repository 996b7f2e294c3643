"""``validate`` checks each webhook target: its URL and its shared secret (never shown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coven_codex.settings import Settings
from coven_codex.validate.framework import ProbeContext, Status, run_plan
from coven_codex.validate.webhook_probes import webhook_plan

SECRET = "validate-secret-0123456789abcdef"


async def outcomes(settings: Settings) -> dict[str, tuple[Status, str]]:
    results = await run_plan(webhook_plan(settings), ProbeContext(settings=settings))
    return {o.probe.code: (o.result.status, o.result.detail + " " + (o.result.fix or "")) for o in results}


def settings_for(**target: object) -> Settings:
    return Settings.model_validate({"webhooks": {"targets": [{"name": "ci", **target}]}})


async def test_a_present_secret_and_an_https_url_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COVEN_WEBHOOK_SECRET", SECRET)
    found = await outcomes(settings_for(url="https://ci.example.com/hook"))
    assert found["webhook_ci_url"][0] is Status.PASS
    assert found["webhook_ci_secret"][0] is Status.PASS
    assert all(SECRET not in detail for _, detail in found.values())


async def test_a_missing_secret_fails_saying_where_to_put_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COVEN_WEBHOOK_SECRET", raising=False)
    found = await outcomes(settings_for(url="https://ci.example.com/hook"))
    status, detail = found["webhook_ci_secret"]
    assert status is Status.FAIL and "COVEN_WEBHOOK_SECRET" in detail


async def test_plain_http_off_this_machine_is_a_warning_and_a_loose_secret_file_too(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o644)
    found = await outcomes(settings_for(url="http://ci.example.com/hook", secret_file=str(secret_file)))
    assert found["webhook_ci_url"][0] is Status.WARN and "unencrypted" in found["webhook_ci_url"][1]
    assert found["webhook_ci_secret"][0] is Status.WARN
    loopback = await outcomes(settings_for(url="http://127.0.0.1:9000/hook", secret_file=str(secret_file)))
    assert loopback["webhook_ci_url"][0] is Status.PASS
