"""A conversation's state belongs to its journal, not only to the workspace (issue 35).

The daemon is a real process, Codex is the real CLI 0.169.0, the model is the scripted server,
which records every request Codex makes: what a conversation's thread carries is read there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import AgentHarness, replies, user_prompts
from legacy_fixture import FIRST_THOUGHT, SECRET, install

from coven_codex.agent.scope import JOURNALS_DIR
from coven_codex.agent.state import SESSIONS_DIR
from coven_codex.testing.model_server import ScriptedModelServer
from coven_codex.testing.redis_server import RedisServer
from coven_codex.testing.request_log import RecordedRequest

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]

Factory = Callable[[Path, ScriptedModelServer], AgentHarness]


def request_of(server: ScriptedModelServer, prompt: str) -> RecordedRequest:
    """The one model request whose newest user prompt is ``prompt``."""
    found = [r for r in server.requests.responses_requests() if user_prompts(r) and user_prompts(r)[-1] == prompt]
    assert len(found) == 1, [user_prompts(r) for r in server.requests.responses_requests()]
    return found[0]


async def ask(h: AgentHarness, conversation: str, text: str) -> None:
    """Start the daemon on the harness's journal, send ``text`` in ``conversation``, wait for its echo, stop."""
    daemon = await h.start()
    await h.think(conversation, text)
    await h.wait_for(lambda es: f"echo: {text}" in replies(es, conversation), what=f"the reply to {text!r}")
    assert await h.stop(daemon) == 0, daemon.log()[-3000:]


async def test_a_new_journal_on_the_same_workspace_starts_conversations_afresh_and_the_old_one_resumes(
    codex_bin_169: Path, harness_factory: Factory, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    h = harness_factory(codex_bin_169, model_server)
    await ask(h, "c", "the vault password is swordfish")  # journal A

    await h.use_journal(tmp_path / "b.jsonl")  # the same workspace, a new journal B
    await ask(h, "c", "what did I tell you before?")
    first_of_b = request_of(model_server, "what did I tell you before?")
    assert user_prompts(first_of_b) == ["what did I tell you before?"]
    assert "swordfish" not in json.dumps(first_of_b.json)

    await h.use_journal(tmp_path / "journal.jsonl")  # back to A: its thread, with its history
    await ask(h, "c", "and now?")
    assert user_prompts(request_of(model_server, "and now?")) == ["the vault password is swordfish", "and now?"]
    # B's second thought is on B's thread, which never heard of A.
    await h.use_journal(tmp_path / "b.jsonl")
    await ask(h, "c", "still nothing?")
    assert user_prompts(request_of(model_server, "still nothing?")) == ["what did I tell you before?", "still nothing?"]
    assert len(list((h.state_dir / JOURNALS_DIR).iterdir())) == 2


async def test_state_an_older_version_left_moves_to_the_journal_it_served_and_no_other(
    codex_bin_169: Path, harness_factory: Factory, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """The upgrade: ``state_dir/sessions`` as the code before issue 35 wrote it for journal A
    (tests/fixtures/legacy_state). A new journal B started first gets none of it; A then resumes
    its thread, with its history, and the old folder is gone."""
    h = harness_factory(codex_bin_169, model_server)
    install(tmp_path, h.state_dir, h.codex_home)
    legacy = h.state_dir / SESSIONS_DIR
    assert len(list(legacy.iterdir())) == 2

    await h.use_journal(tmp_path / "b.jsonl")
    await ask(h, "c", "what is the launch code?")
    first_of_b = request_of(model_server, "what is the launch code?")
    assert user_prompts(first_of_b) == ["what is the launch code?"]
    assert SECRET not in json.dumps(first_of_b.json)
    assert len(list(legacy.iterdir())) == 2  # A's conversations wait for A

    await h.use_journal(tmp_path / "journal.jsonl")
    await ask(h, "c", "and the launch code is?")
    resumed = request_of(model_server, "and the launch code is?")
    assert user_prompts(resumed) == [FIRST_THOUGHT, "and the launch code is?"]
    assert not legacy.exists()
    log = h.daemons[-1].log()
    assert "moved the state of 2 conversation(s) from an older coven-codex" in log
    # Nothing of A was answered twice: its ingress cursor and its states still agree.
    assert replies(await h.entries(), "c") == [f"echo: {FIRST_THOUGHT}", "echo: and the launch code is?"]


@pytest.mark.parametrize("cluster", [False, True], ids=["one-daemon", "cluster"])
async def test_a_new_redis_stream_on_the_same_workspace_gets_none_of_another_streams_history(
    cluster: bool,
    codex_bin_169: Path,
    harness_factory: Callable[..., AgentHarness],
    model_server: ScriptedModelServer,
    redis_server: RedisServer,
) -> None:
    """The same with Redis journals, alone and as a cluster (whose mirror in Redis is per stream
    already, but whose adoption took the local state when the new stream had no mirror of it)."""
    flags = ("--cluster",) if cluster else ()
    prefix = f"scope-{uuid.uuid4().hex[:8]}"
    a = harness_factory(codex_bin_169, model_server, redis_server.url(key=f"{prefix}-a"))
    a.extra_args = list(flags)
    await ask(a, "c", "the vault password is swordfish")
    b = harness_factory(codex_bin_169, model_server, redis_server.url(key=f"{prefix}-b"))
    b.extra_args = list(flags)
    await ask(b, "c", "what did I tell you before?")
    first_of_b = request_of(model_server, "what did I tell you before?")
    assert user_prompts(first_of_b) == ["what did I tell you before?"]
    assert "swordfish" not in json.dumps(first_of_b.json)
    # The same stream by another spelling of its URL is the same journal: A's thread, with its history.
    a_by_name = harness_factory(codex_bin_169, model_server, f"redis://localhost:{redis_server.port}/0?key={prefix}-a")
    a_by_name.extra_args = list(flags)
    await ask(a_by_name, "c", "and now?")
    assert user_prompts(request_of(model_server, "and now?")) == ["the vault password is swordfish", "and now?"]
