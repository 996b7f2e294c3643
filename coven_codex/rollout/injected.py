"""Messages Codex itself adds to a thread as ``role: user`` although the user never typed them.

Codex puts its environment description, the AGENTS.md instructions, skills, an interrupted turn's
note and the like into the model history as user messages. Anything that counts what the user
sent (recovery after a crash, tests asserting on what the model saw) must leave them out. They
are recognised by the opening Codex gives them (seen on 0.47.0 and 0.169.0); a thought that
itself begins with one of these openings would be taken for one of them.
"""

from __future__ import annotations

INJECTED_PREFIXES: tuple[str, ...] = (
    "<environment_context>",
    "<user_instructions>",
    "<INSTRUCTIONS>",
    "# AGENTS.md instructions",
    "<permissions instructions>",
    "<skills_instructions>",
    "<turn_aborted>",
    "<user_shell_command>",
)


def is_injected(text: str) -> bool:
    """Whether a ``role: user`` message text is one Codex added, not one the user sent."""
    return text.startswith(INJECTED_PREFIXES)
