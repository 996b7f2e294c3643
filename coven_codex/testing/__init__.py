"""Test infrastructure that ships with the package (the offline demo uses it too).

- :class:`ScriptedModelServer`: an OpenAI Responses API server on 127.0.0.1, driven by a
  script of steps or a responder, recording every request (see :mod:`.model_server`).
- Steps: :class:`Reply`, :class:`Reasoning`, :class:`CallTool`, :class:`RunCommand`,
  :class:`OutputItem`,
  :class:`HttpError`, :class:`ErrorEvent`, :class:`Stall`, :class:`Disconnect`.
- Responders: :func:`echo_responder`, :func:`command_responder`, :func:`tool_rule`.
- :func:`write_codex_config`: a Codex ``config.toml`` pointing at the server.
"""

from coven_codex.testing.codex_config import codex_config, codex_env, write_codex_config
from coven_codex.testing.model_server import EXHAUSTED_TEXT, ScriptedModelServer
from coven_codex.testing.request_log import FunctionCallOutput, RecordedRequest, RequestLog
from coven_codex.testing.responders import Responder, command_responder, echo_responder, tool_rule
from coven_codex.testing.steps import (
    CallTool,
    Disconnect,
    ErrorEvent,
    HttpError,
    OutputItem,
    Reasoning,
    Reply,
    RunCommand,
    Stall,
    Step,
    TurnScript,
)

__all__ = [
    "EXHAUSTED_TEXT",
    "CallTool",
    "Disconnect",
    "ErrorEvent",
    "FunctionCallOutput",
    "HttpError",
    "OutputItem",
    "Reasoning",
    "RecordedRequest",
    "Reply",
    "RequestLog",
    "Responder",
    "RunCommand",
    "ScriptedModelServer",
    "Stall",
    "Step",
    "TurnScript",
    "codex_config",
    "codex_env",
    "command_responder",
    "echo_responder",
    "tool_rule",
    "write_codex_config",
]
