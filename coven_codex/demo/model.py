"""The demo's stand-in for a real model: a scripted responder that calls spells when asked.

It recognises a few phrasings ("what is 2 plus 3", "roll 3 dice", "count the words in ...")
and calls the matching spell through Codex; Codex runs the spell via the MCP shim and sends
the result back, and the responder turns it into a sentence. Anything else gets a short
explanation of what to try.
"""

from __future__ import annotations

import re

from coven_codex.rollout.tool_output import clean_tool_output
from coven_codex.testing.request_log import RecordedRequest
from coven_codex.testing.responders import last_user_text, pending_tool_output
from coven_codex.testing.steps import CallTool, Reasoning, Reply, TurnScript

SERVER = "coven"
_ADD = re.compile(r"(-?\d+)\s*(?:\+|plus|and)\s*(-?\d+)", re.I)
_DICE = re.compile(r"roll\s+(\d+)?\s*(?:d(\d+)|dice|die)", re.I)
_WORDS = re.compile(r"count the words in[:\s]+(.+)", re.I | re.S)

INTRO = (
    "Hello from the offline demo. I am a scripted model, but everything between us is real: "
    'the coven-codex daemon, the Codex CLI and its rollout files. Ask me "what is 2 plus 3?", '
    '"roll 3 dice" or "count the words in <text>" and I will call a Python spell.'
)


def _tool_output(request: RecordedRequest) -> tuple[str, str] | None:
    """(tool, output) when the request carries the result of the call this turn made."""
    done = pending_tool_output(request)
    if done is None:
        return None
    tool = next(
        (
            str(item.get("name"))
            for item in request.input_items()
            if item.get("type") == "function_call" and item.get("call_id") == done.call_id
        ),
        "spell",
    )
    return tool, clean_tool_output(done.output).text


def demo_responder(request: RecordedRequest) -> TurnScript:
    """The demo's model: call the spell a sum, dice or word count asks for, report its result; else say hello."""
    done = _tool_output(request)
    if done is not None:
        tool, output = done
        return Reply(
            f"The `{tool.split('__')[-1]}` spell ran in the daemon's Python process and returned {output.strip()}."
        )
    text = last_user_text(request)
    if match := _ADD.search(text):
        return (
            Reasoning("The user wants a sum; the add spell computes it."),
            CallTool(f"{SERVER}.add", {"a": int(match[1]), "b": int(match[2])}),
        )
    if match := _DICE.search(text):
        return CallTool(f"{SERVER}.roll_dice", {"count": int(match[1] or 1), "sides": int(match[2] or 6)})
    if match := _WORDS.search(text):
        return CallTool(f"{SERVER}.word_count", {"text": match[1].strip()})
    return Reply(INTRO)
