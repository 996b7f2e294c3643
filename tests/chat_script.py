"""The scripted model of the chat surfaces' end-to-end tests (Slack, Discord, Telegram, the web page):
a thought starting ``add`` calls the ``coven.add`` spell, one starting ``run`` an escalated command
(an approval), any other gets ``streamed`` as a reply in small pieces."""

from __future__ import annotations

from collections.abc import Callable

from agent_harness import user_prompts

from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.responders import pending_tool_output
from coven_codex.testing.steps import CallTool, Reply, TurnScript, escalated_command

STREAMED = "Here is a streamed answer from codex, in several pieces."


def last_prompt(request: RecordedRequest) -> str:
    """The text the user typed last ('' before any)."""
    prompts = user_prompts(request)
    return prompts[-1] if prompts else ""


def chat_responder(streamed: str = STREAMED, *, delay: float = 0.04) -> Callable[[RecordedRequest], TurnScript]:
    """The model's answers (module docstring); ``delay``: seconds between the reply's pieces."""

    def respond(request: RecordedRequest) -> TurnScript:
        last = last_prompt(request)
        output = pending_tool_output(request)
        if output is not None:
            return Reply("the command ran") if last.startswith("run") else Reply(f"the spell says {output.output}")
        if last.startswith("add"):
            return CallTool("coven.add", {"a": 2, "b": 3})
        if last.startswith("run"):
            return escalated_command("touch approved.txt", "create approved.txt")
        return Reply(streamed, chunk_size=4, delay=delay)

    return respond
