"""The scripted model's steps (coven_codex/testing/steps.py) that tests share."""

from __future__ import annotations

from coven_codex.testing.steps import CallTool, escalated_command


def test_an_escalated_command_is_an_exec_command_asking_to_leave_the_sandbox_with_its_reason() -> None:
    call = escalated_command("touch approved.txt", "create approved.txt")
    assert isinstance(call, CallTool)
    assert call.name == "exec_command"
    assert call.arguments == {
        "cmd": "touch approved.txt",
        "sandbox_permissions": "require_escalated",
        "login": False,
        "tty": False,
        "yield_time_ms": 5000,
        "justification": "create approved.txt",
    }
