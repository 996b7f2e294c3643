"""The shared ``[adapters.*]`` configuration (kit/config.py) and its ``validate`` probes (adapter_probes.py)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from coven_codex.adapters.kit.config import (
    AdapterConfigError,
    DiscordSection,
    SlackSection,
    parse_section,
)
from coven_codex.adapters.kit.platform import Address, User
from coven_codex.settings import SettingsError, load_adapter_section, load_settings
from coven_codex.support.secret import Secret
from coven_codex.validate.adapter_probes import adapter_plan
from coven_codex.validate.framework import ProbeContext, Status, run_plan

BOT = "xoxb-1234567890-0987654321-abcdefABCDEF123456"
APP = "xapp-1-A0123456789-1234567890-abcdef0123456789"
DISCORD = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GaBcDe.abcdefghijklmnopqrstuvwxyz012345"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "coven.toml"
    path.write_text(text)
    return path


def test_a_secret_never_shows_its_value(caplog: pytest.LogCaptureFixture) -> None:
    secret = Secret(BOT)
    assert secret.reveal() == BOT
    shown = [
        repr(secret),
        str(secret),
        f"{secret}",
        f"{secret!r}",
        format(secret, ">40"),
        repr([secret]),
        repr({"t": secret}),
    ]
    assert all(BOT not in text for text in shown)
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("token %s %r", secret, secret)
    assert BOT not in caplog.text
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(secret)


@pytest.mark.parametrize(
    "line",
    [
        f'token = "{BOT}"',
        f'token_env = "{BOT}"',
        f'bot_token = "{BOT}"',
        f'app_token = "{APP}"',
        'signing_secret = "x"',
    ],
)
def test_a_token_written_into_coven_toml_is_refused_without_echoing_it(tmp_path: Path, line: str) -> None:
    config = write(tmp_path, f'[adapters.slack]\nallow_users = ["U1"]\n{line}\n')
    with pytest.raises(AdapterConfigError) as refused:
        load_adapter_section("slack", config)
    message = str(refused.value)
    assert "never written in coven.toml" in message and "_env =" in message
    assert BOT not in message and APP not in message
    with pytest.raises(SettingsError) as also:
        load_settings(config)
    assert "never written in coven.toml" in str(also.value) and BOT not in str(also.value)


def test_a_discord_token_literal_is_refused_too() -> None:
    with pytest.raises(AdapterConfigError, match='token_env = "DISCORD_BOT_TOKEN"') as refused:
        parse_section("discord", {"token": DISCORD, "allow_users": ["1"]})
    assert DISCORD not in str(refused.value)


def test_the_daemon_settings_accept_the_adapters_table(tmp_path: Path) -> None:
    """A coven.toml shared by the daemon and the adapters: ``run`` and ``validate`` read it (it was refused)."""
    config = write(
        tmp_path,
        'journal = "chat/journal.jsonl"\n[adapters.slack]\ntoken_file = "secrets/bot"\nallow_users = ["U1"]\n'
        '[adapters.discord]\nallow_groups = ["42"]\nlisten_channels = ["7"]\n',
    )
    settings = load_settings(config)
    assert settings.adapters.slack is not None and settings.adapters.discord is not None
    assert settings.adapters.slack.token_file == tmp_path / "secrets" / "bot"
    assert [s.PLATFORM for s in settings.adapters.configured()] == ["slack", "discord"]
    section, journal = load_adapter_section("slack", config)
    assert journal == tmp_path / "chat" / "journal.jsonl"
    assert isinstance(section, SlackSection) and section.token_file == tmp_path / "secrets" / "bot"


def test_unknown_keys_and_a_missing_section_are_named(tmp_path: Path) -> None:
    with pytest.raises(AdapterConfigError, match="allow_user"):
        load_adapter_section("slack", write(tmp_path, '[adapters.slack]\nallow_user = ["U1"]\n'))
    with pytest.raises(AdapterConfigError, match=r"has no \[adapters.slack\] section"):
        load_adapter_section("slack", write(tmp_path, 'journal = "j.jsonl"\n'))
    with pytest.raises(AdapterConfigError, match="edit_interval"):
        load_adapter_section("slack", write(tmp_path, "[adapters.slack]\nedit_interval = 0.01\n"))


def test_tokens_come_from_the_environment_or_a_file(tmp_path: Path) -> None:
    section = SlackSection(allow_users=["U1"])
    secrets = section.load_secrets({"SLACK_BOT_TOKEN": BOT, "SLACK_APP_TOKEN": APP})
    assert secrets == {"token": Secret(BOT), "app_token": Secret(APP)}
    (tmp_path / "bot").write_text(BOT + "\n")
    filed = SlackSection(token_file=tmp_path / "bot", app_token_env="MY_APP", allow_users=["U1"])
    assert filed.load_secrets({"MY_APP": APP})["token"].reveal() == BOT
    http = SlackSection(mode="http", allow_users=["U1"])
    assert set(http.load_secrets({"SLACK_BOT_TOKEN": BOT, "SLACK_SIGNING_SECRET": "0" * 32})) == {
        "token",
        "signing_secret",
    }


def test_a_missing_or_malformed_token_says_where_to_get_it_without_echoing_it(tmp_path: Path) -> None:
    section = SlackSection(allow_users=["U1"])
    with pytest.raises(AdapterConfigError, match=r"set the environment variable SLACK_BOT_TOKEN.*OAuth"):
        section.load_secrets({})
    with pytest.raises(AdapterConfigError, match="starts with xoxb-") as wrong:
        section.load_secrets({"SLACK_BOT_TOKEN": APP, "SLACK_APP_TOKEN": APP})
    assert APP not in str(wrong.value)
    with pytest.raises(AdapterConfigError, match="starts with xapp-"):
        section.load_secrets({"SLACK_BOT_TOKEN": BOT, "SLACK_APP_TOKEN": BOT})
    missing = SlackSection(token_file=tmp_path / "nope", allow_users=["U1"])
    with pytest.raises(AdapterConfigError, match="cannot read the Slack bot token from token_file"):
        missing.load_secrets({})
    with pytest.raises(AdapterConfigError, match="three dot-separated parts"):
        DiscordSection().load_secrets({"DISCORD_BOT_TOKEN": "nope"})


def test_access_lists_session_mode_and_problems() -> None:
    section = SlackSection(
        allow_users=["U1"], allow_groups=["S9"], allow_channels=["C1"], admins=["U1"], per_user_channels=["C1"]
    )
    policy = section.access_policy()
    assert policy.refusal(User("U1"), Address("C1", "T1")) is None
    assert policy.refusal(User("U2", roles=frozenset({"S9"})), Address("C1", "T1")) is None
    assert policy.refusal(User("U2"), Address("C1", "T1")) is not None
    assert policy.refusal(User("U1"), Address("C2", "T1")) is not None
    assert policy.refusal(User("U2", roles=frozenset({"S9"})), Address("C1"), "new") is not None
    mapping = section.channel_map()
    assert mapping.conversation(Address("C1", "T1", "17.1"), User("U1")) == "slack:T1/C1/17.1@U1"
    assert mapping.conversation(Address("C2", "T1", "17.1"), User("U1")) == "slack:T1/C2/17.1"
    assert section.access_problems() == []
    assert len(SlackSection(allow_channels=[]).access_problems()) == 2
    assert SlackSection().access_policy().allows_nobody


async def test_validate_checks_each_configured_adapter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with socket.socket() as closed:  # no test talks to Slack: its API is a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        api_url = f"http://127.0.0.1:{closed.getsockname()[1]}/api/"
    config = write(
        tmp_path,
        f'[adapters.slack]\nallow_users = ["U1"]\napi_url = "{api_url}"\n'
        '[adapters.discord]\ntoken_env = "MY_DISCORD"\nallow_channels = []\n',
    )
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP)
    monkeypatch.delenv("MY_DISCORD", raising=False)
    settings = load_settings(config)
    outcomes = {o.probe.code: o.result for o in await run_plan(adapter_plan(settings), ProbeContext(settings))}
    assert [code for code in outcomes] == [
        "slack_library",
        "slack_tokens",
        "slack_access",
        "slack_scopes",
        "discord_library",
        "discord_tokens",
        "discord_access",
    ]
    assert outcomes["slack_library"].status is Status.PASS
    assert outcomes["slack_tokens"].status is Status.PASS and BOT not in outcomes["slack_tokens"].detail
    assert "$SLACK_BOT_TOKEN" in outcomes["slack_tokens"].detail
    assert outcomes["slack_access"].status is Status.PASS
    assert outcomes["slack_scopes"].status is Status.WARN and "could not be reached" in outcomes["slack_scopes"].detail
    assert outcomes["discord_tokens"].status is Status.FAIL and "MY_DISCORD" in outcomes["discord_tokens"].detail
    assert outcomes["discord_access"].status is Status.FAIL and "allows nobody" in outcomes["discord_access"].detail
    assert adapter_plan(load_settings(write(tmp_path, 'journal = "j"\n'))) == ()


async def test_validate_names_the_extra_when_the_library_is_missing(tmp_path: Path) -> None:
    class Missing(SlackSection):
        LIBRARY = "coven_codex_no_such_library"

    settings = load_settings(write(tmp_path, '[adapters.slack]\nallow_users = ["U1"]\n'))
    settings.adapters.slack = Missing(allow_users=["U1"])
    outcome = (await run_plan(adapter_plan(settings)[:1], ProbeContext(settings)))[0]
    assert outcome.result.status is Status.FAIL and "pip install 'coven-codex[slack]'" in outcome.result.fix


def test_coven_codex_validate_runs_the_adapter_probes(tmp_path: Path) -> None:
    import json
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    config = write(tmp_path, f'workspace = "{tmp_path}"\n[adapters.slack]\nallow_users = ["U1"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")} | {"SLACK_BOT_TOKEN": BOT}
    done = subprocess.run(
        [str(root / ".venv" / "bin" / "coven-codex"), "validate", "--config", str(config), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    checks = {check["code"]: check for check in json.loads(done.stdout)["checks"]}
    assert checks["slack_tokens"]["status"] == "fail" and "SLACK_APP_TOKEN" in checks["slack_tokens"]["detail"]
    assert checks["slack_access"]["status"] == "pass" and checks["slack_library"]["status"] == "pass"
    assert BOT not in done.stdout and done.returncode == 1


async def test_validate_warns_when_a_token_file_is_readable_by_everyone(tmp_path: Path) -> None:
    secret = tmp_path / "bot"
    secret.write_text(BOT)
    (tmp_path / "app").write_text(APP)
    config = write(tmp_path, '[adapters.slack]\ntoken_file = "bot"\napp_token_file = "app"\nallow_users = ["U1"]\n')
    settings = load_settings(config)
    for mode, status in ((0o644, Status.WARN), (0o600, Status.PASS)):
        secret.chmod(mode)
        (tmp_path / "app").chmod(0o600)
        tokens = [
            o for o in await run_plan(adapter_plan(settings), ProbeContext(settings)) if o.probe.code == "slack_tokens"
        ]
        assert tokens[0].result.status is status, tokens[0].result
    assert BOT not in tokens[0].result.detail
