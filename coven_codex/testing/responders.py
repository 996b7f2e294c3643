"""Responders: functions that decide a turn script from the request Codex sent.

A responder is ``Callable[[RecordedRequest], TurnScript]``. The server calls it when its
script is exhausted (or when it has no script).

- :func:`echo_responder` replies ``"echo: <last user text>"``; after a tool call it
  replies ``"tool result: <output>"``.
- :func:`command_responder` reads the user's text as a tiny command language (handy for
  the demo and for tests driving Codex out of process)::

      /tool <server.tool> [json-arguments]   call a tool, then report its result
      /error <status> [message]              answer with that HTTP status
      /fail [message]                        end the stream with response.failed
      /stall <seconds> [text]                stall, then reply with text
      /think <summary>                       a reasoning summary, then a reply
      anything else                          echo

- :func:`tool_rule` builds a responder that calls a tool when the text matches a regex.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from coven_codex.testing.request_log import FunctionCallOutput, RecordedRequest
from coven_codex.testing.steps import CallTool, ErrorEvent, HttpError, Reasoning, Reply, Stall, TurnScript

Responder = Callable[[RecordedRequest], TurnScript]


def last_user_text(request: RecordedRequest) -> str:
    """The last text the user typed in the request, or ``""``."""
    texts = request.user_texts()
    return texts[-1] if texts else ""


def pending_tool_output(request: RecordedRequest) -> FunctionCallOutput | None:
    """The tool result that ends the input (the model must now react to it), or None."""
    items = request.input_items()
    if items and items[-1].get("type") in {"function_call_output", "custom_tool_call_output"}:
        outputs = request.function_call_outputs()
        return outputs[-1] if outputs else FunctionCallOutput("", "")
    return None


def echo_responder(request: RecordedRequest) -> TurnScript:
    """Reply ``"echo: <last user text>"``; after a tool call, ``"tool result: <output>"``."""
    output = pending_tool_output(request)
    if output is not None:
        return Reply(f"tool result: {output.output}")
    return Reply(f"echo: {last_user_text(request)}")


_COMMAND = re.compile(r"^/(?P<verb>tool|error|fail|stall|think)\b\s*(?P<rest>.*)$", re.S)


def command_responder(request: RecordedRequest) -> TurnScript:
    """Act on the user's text as the command language of the module docstring; anything else is echoed."""
    output = pending_tool_output(request)
    if output is not None:
        return Reply(f"tool result: {output.output}")
    text = last_user_text(request).strip()
    match = _COMMAND.match(text)
    if match is None:
        return Reply(f"echo: {text}")
    verb, rest = match["verb"], match["rest"].strip()
    if verb == "tool":
        name, _, raw_arguments = rest.partition(" ")
        try:
            arguments: Any = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except ValueError:
            return Reply(f"/tool arguments are not JSON: {raw_arguments}")
        return CallTool(name, arguments)
    if verb == "error":
        status_text, _, message = rest.partition(" ")
        if not status_text.isdigit():
            return Reply("usage: /error <status> [message]")
        return HttpError(int(status_text), message or None)
    if verb == "fail":
        return ErrorEvent(rest or "scripted failure")
    if verb == "stall":
        seconds_text, _, reply = rest.partition(" ")
        try:
            seconds = float(seconds_text)
        except ValueError:
            return Reply("usage: /stall <seconds> [text]")
        return (Stall(seconds), Reply(reply or f"stalled {seconds:g}s"))
    return (Reasoning(rest), Reply(f"thought about: {rest}"))


def tool_rule(
    pattern: str,
    tool: str,
    arguments: Callable[[re.Match[str]], Any] | Any = None,
    *,
    otherwise: Responder = echo_responder,
) -> Responder:
    """A responder calling ``tool`` when the user's text matches ``pattern``.

    ``arguments`` is a dict (or a function of the match returning one; default: the
    named groups). After the tool ran, it replies ``"tool result: <output>"``; any other
    request goes to ``otherwise``.
    """
    regex = re.compile(pattern)

    def respond(request: RecordedRequest) -> TurnScript:
        output = pending_tool_output(request)
        if output is not None:
            return Reply(f"tool result: {output.output}")
        match = regex.search(last_user_text(request))
        if match is None:
            return otherwise(request)
        if callable(arguments):
            args = arguments(match)
        elif arguments is None:
            args = match.groupdict()
        else:
            args = arguments
        return CallTool(tool, args)

    return respond


NAMED_RESPONDERS: dict[str, Responder] = {"echo": echo_responder, "commands": command_responder}
