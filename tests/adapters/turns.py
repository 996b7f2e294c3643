"""A turn as the daemon journals it, for the progress card's tests on every adapter."""

from __future__ import annotations

from coven_codex.entries import (
    ActivityEntry,
    BaseEntry,
    DeltaEntry,
    ResponseEntry,
    StatusEntry,
    ToolCallEntry,
    ToolResultEntry,
)


def tool_turn(conversation: str, calls: int, reply: str, *, tag: str = "t") -> list[BaseEntry]:
    """A turn of ``calls`` shell commands (the 8th fails with exit 1), a plan, a streamed reply."""
    entries: list[BaseEntry] = [StatusEntry(state="turn_started", conversation=conversation)]
    entries.append(ActivityEntry(activity="plan", text="1. look around\n2. count", conversation=conversation))
    for n in range(calls):
        call_id = f"{tag}-call-{n}"
        failed = n == 7
        command = "false" if failed else f"echo step {n:02}"
        arguments = {"cmd": command} if n % 2 else {"command": ["bash", "-lc", command]}
        entries.append(
            ToolCallEntry(tool="exec_command", arguments=arguments, call_id=call_id, conversation=conversation)
        )
        result = ToolResultEntry(
            text="" if failed else f"output of step {n:02}",
            tool="exec_command",
            call_id=call_id,
            is_error=failed,
            conversation=conversation,
        )
        if failed:
            result = result.model_copy(update={"exit_code": 1})
        entries.append(result)
    entries += [
        DeltaEntry(text=reply[i : i + 5], item_id=f"{tag}-msg", conversation=conversation)
        for i in range(0, len(reply), 5)
    ]
    entries.append(ResponseEntry(text=reply, conversation=conversation))
    entries.append(StatusEntry(state="turn_completed", conversation=conversation))
    return entries
