"""End to end: settings chosen from the chat (``settings`` entries: ``/project``, ``/model``, ``/mode``) with the
real Codex CLI and the scripted model server; a restart of the daemon keeps them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentHarness, replies, send_file_when_asked

from coven_codex.entries import BaseEntry, ErrorEntry, FileEntry, SettingsEntry, StatusEntry
from coven_codex.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.codex, pytest.mark.timeout(240)]


def _settings_answers(entries: list[BaseEntry]) -> list[StatusEntry]:
    return [e for e in entries if isinstance(e, StatusEntry) and e.state == "settings"]


def _config(h: AgentHarness, project: Path) -> Path:
    config = h.tmp / "coven.toml"
    config.write_text(
        f'models = ["scripted-a", "scripted-b"]\nmodes = ["read-only", "ask"]\n\n[projects]\napi = "{project}"\n'
    )
    return config


def _rollout_cwds(codex_home: Path) -> set[str]:
    """The working directories the rollouts' ``session_meta`` and turn contexts record."""
    cwds: set[str] = set()
    for rollout in (codex_home / "sessions").rglob("rollout-*.jsonl"):
        for line in rollout.read_text().splitlines():
            item = json.loads(line)
            if item.get("type") in {"session_meta", "turn_context"}:
                cwds.add(item["payload"]["cwd"])
    return cwds


async def test_project_and_model_from_the_chat_reach_codex_and_survive_a_restart(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: object
) -> None:
    assert callable(harness_factory)
    h: AgentHarness = harness_factory(codex_bin_169, model_server)
    project = h.workspace / "api"
    project.mkdir()
    config = _config(h, project)
    daemon = await h.start("--config", str(config))
    await h.think("c", "first")
    await h.wait_for(lambda es: "echo: first" in replies(es, "c"), what="the first reply")

    await h.append(SettingsEntry(conversation="c", sender="alice", project="api"))
    await h.append(SettingsEntry(conversation="c", sender="alice", model="scripted-b"))
    await h.append(SettingsEntry(conversation="c", sender="alice", model="gpt-unlisted"))
    await h.think("c", "in the project")
    entries = await h.wait_for(lambda es: "echo: in the project" in replies(es, "c"), what="the project's reply")
    answers = _settings_answers(entries)
    assert "the next message starts a new Codex thread in api" in answers[0].text
    assert answers[-1].settings is not None and answers[-1].settings.project == "api"
    assert answers[-1].settings.model == "scripted-b"
    refused = [e for e in entries if isinstance(e, ErrorEntry) and e.code == "REFUSED"]
    assert len(refused) == 1 and "gpt-unlisted" in refused[0].text and "scripted-a, scripted-b" in refused[0].hint
    last = model_server.requests.responses_requests()[-1]
    assert last.json["model"] == "scripted-b"
    assert str(project) in _rollout_cwds(h.codex_home)
    assert await h.stop(daemon) == 0

    # A restart keeps both: the next thread still works in the project, with the model.
    before = len(model_server.requests.responses_requests())
    daemon = await h.start("--config", str(config))
    await h.append(SettingsEntry(conversation="c", sender="alice"))  # a question: what are they?
    await h.think("c", "after the restart")
    entries = await h.wait_for(lambda es: "echo: after the restart" in replies(es, "c"), what="the reply after")
    answer = _settings_answers(entries)[-1]
    assert answer.settings is not None and (answer.settings.project, answer.settings.model) == ("api", "scripted-b")
    assert "models: scripted-a, scripted-b" in answer.text
    after = model_server.requests.responses_requests()[before:]
    assert after and all(r.json["model"] == "scripted-b" for r in after)
    assert await h.stop(daemon) == 0
    # The thread that took the message after the restart works in the project (its own rollout says so).
    rollouts = [r for r in (h.codex_home / "sessions").rglob("rollout-*.jsonl") if "after the restart" in r.read_text()]
    assert len(rollouts) == 1
    contexts = [json.loads(line) for line in rollouts[0].read_text().splitlines()]
    cwds = {c["payload"]["cwd"] for c in contexts if c.get("type") in {"session_meta", "turn_context"}}
    assert cwds == {str(project)}


async def test_send_file_after_project_sends_the_project_s_file(codex_bin_169: Path, harness_factory: object) -> None:
    """After ``/project`` Codex works in the project's directory, and ``send_file`` takes a relative path
    from there (the code before looked for the conversation's directory in its thoughts, which name
    none, and sent the workspace's file of that name)."""
    assert callable(harness_factory)
    async with ScriptedModelServer(responder=send_file_when_asked("report.txt", "the report")) as server:
        h: AgentHarness = harness_factory(codex_bin_169, server)
        project = h.workspace / "api"
        project.mkdir()
        (h.workspace / "report.txt").write_text("the workspace's report\n")
        (project / "report.txt").write_text("the project's report\n")
        daemon = await h.start("--config", str(_config(h, project)), "--send-file", "on")
        await h.append(SettingsEntry(conversation="c", sender="alice", project="api"))
        await h.think("c", "send the report")
        entries = await h.wait_for(
            lambda es: any(e.kind == "response" and "sent:" in e.text for e in es), what="the reply after the file"
        )
        assert await h.stop(daemon) == 0
    [sent] = [e for e in entries if isinstance(e, FileEntry)]
    assert sent.conversation == "c" and sent.text == "the report"
    assert Path(sent.attachment.url.removeprefix("file://")).read_text() == "the project's report\n"


def _turn_contexts(codex_home: Path) -> list[dict[str, Any]]:
    contexts: list[dict[str, Any]] = []
    for rollout in sorted((codex_home / "sessions").rglob("rollout-*.jsonl")):
        for line in rollout.read_text().splitlines():
            item = json.loads(line)
            if item.get("type") == "turn_context":
                contexts.append(item["payload"])
    return contexts


async def test_mode_from_the_chat_keeps_the_thread_and_sets_codex_s_sandbox_and_approvals(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: object
) -> None:
    assert callable(harness_factory)
    h: AgentHarness = harness_factory(codex_bin_169, model_server)
    config = _config(h, h.workspace)
    daemon = await h.start("--config", str(config))
    await h.think("m", "writable")
    await h.wait_for(lambda es: "echo: writable" in replies(es, "m"), what="the first reply")
    await h.append(SettingsEntry(conversation="m", sender="ann", mode="read-only"))
    await h.append(SettingsEntry(conversation="m", sender="ann", mode="auto"))  # not in modes
    await h.think("m", "read only now")
    entries = await h.wait_for(lambda es: "echo: read only now" in replies(es, "m"), what="the second reply")
    assert await h.stop(daemon) == 0
    refused = [e for e in entries if isinstance(e, ErrorEntry) and e.code == "REFUSED"]
    assert len(refused) == 1 and "mode 'auto'" in refused[0].text and "modes: read-only, ask" in refused[0].hint
    answer = _settings_answers(entries)[-1]
    assert answer.settings is not None and answer.settings.mode == "read-only"
    assert "continues in thread" in answer.text
    contexts = _turn_contexts(h.codex_home)
    sandboxes = [c["sandbox_policy"]["type"] for c in contexts]
    assert sandboxes == ["workspace-write", "read-only"]
    # The same thread: one rollout, whose second turn's model input holds the first turn too.
    assert len(list((h.codex_home / "sessions").rglob("rollout-*.jsonl"))) == 1
    last = model_server.requests.responses_requests()[-1]
    assert "writable" in last.user_texts() and "read only now" in last.user_texts()


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ('[projects]\noutside = "{outside}"\n', "project 'outside' in [projects]: cwd"),
        ('modes = ["read-only", "ask"]\n', "modes ask would widen the sandbox beyond the Codex config's sandbox_mode"),
    ],
    ids=["project-outside-the-roots", "mode-wider-than-the-sandbox"],
)
async def test_a_configuration_the_chat_could_widen_is_refused_at_start(
    codex_bin_169: Path, model_server: ScriptedModelServer, harness_factory: object, toml: str, said: str
) -> None:
    assert callable(harness_factory)
    h: AgentHarness = harness_factory(codex_bin_169, model_server)
    outside = h.tmp / "outside"
    outside.mkdir()
    h.write_base_config(sandbox_mode="read-only")
    config = h.tmp / "coven.toml"
    config.write_text(toml.format(outside=outside))
    daemon = await h.start("--config", str(config))
    assert await daemon.process.wait() == 1
    assert said in daemon.log(), daemon.log()[-2000:]


async def test_mode_and_model_from_the_chat_reach_codex_exec(
    codex_bin_047: Path, model_server: ScriptedModelServer, harness_factory: object
) -> None:
    """The exec driver (Codex 0.47) takes them as ``--model`` and ``-c`` overrides on the resumed thread."""
    assert callable(harness_factory)
    h: AgentHarness = harness_factory(codex_bin_047, model_server)
    daemon = await h.start("--config", str(_config(h, h.workspace)))
    await h.think("x", "before")
    await h.wait_for(lambda es: "echo: before" in replies(es, "x"), what="the first reply")
    await h.append(SettingsEntry(conversation="x", sender="ann", mode="read-only"))
    await h.append(SettingsEntry(conversation="x", sender="ann", model="scripted-a"))
    await h.think("x", "after")
    await h.wait_for(lambda es: "echo: after" in replies(es, "x"), what="the second reply")
    assert await h.stop(daemon) == 0
    last = model_server.requests.responses_requests()[-1]
    assert last.json["model"] == "scripted-a"
    assert "before" in last.user_texts()  # the same thread
    # The turn that took "after" ran read-only: the last turn context of its rollout (the rollout's lines are in order).
    rollouts = [r for r in (h.codex_home / "sessions").rglob("rollout-*.jsonl") if '"after"' in r.read_text()]
    assert len(rollouts) == 1
    lines = [json.loads(line) for line in rollouts[0].read_text().splitlines()]
    sandboxes = [item["payload"]["sandbox_policy"] for item in lines if item.get("type") == "turn_context"]
    assert sandboxes[-1] in ({"mode": "read-only"}, {"type": "read-only"}), sandboxes
