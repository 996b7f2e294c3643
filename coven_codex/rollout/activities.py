"""Records that become ``activity`` entries: what Codex did besides replying and calling tools.

Each typer reads one payload shape (seen in rollouts of Codex 0.104 to 0.147; docs/rollout.md,
"Rollouts of other Codex releases") and returns an :class:`ActivityRecord`, or ``None`` when the
payload carries nothing to show. Texts are cut to :data:`ACTIVITY_TEXT` characters: a summary
or an output can be long, the chat shows a preview.
"""

from __future__ import annotations

import re
from typing import Any

from coven_codex.rollout.records import ActivityRecord, JsonObject

ACTIVITY_TEXT = 2000
USER_SHELL_PREFIX = "<user_shell_command>"
_TAG = re.compile(r"<(?P<tag>command|result)>\n?(?P<body>.*?)\n?</(?P=tag)>", re.S)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _cut(text: str) -> str:
    return text if len(text) <= ACTIVITY_TEXT else text[: ACTIVITY_TEXT - 1] + "…"


def web_search(p: JsonObject) -> ActivityRecord | None:
    """``response_item/web_search_call``: the action says what was searched or opened."""
    action = p.get("action")
    details: list[tuple[str, str | int | bool]] = []
    if isinstance(action, dict):
        kind = _str(action.get("type")) or ""
        query = _str(action.get("query"))
        queries = action.get("queries")
        if query is None and isinstance(queries, list):
            query = "; ".join(q for q in queries if isinstance(q, str)) or None
        url = _str(action.get("url"))
        pattern = _str(action.get("pattern"))
        if query:
            details.append(("query", query))
        if url:
            details.append(("url", url))
        if kind == "open_page" and url:
            text = f"opened {url}"
        elif kind == "find_in_page" and url:
            text = f"looked for {pattern!r} in {url}" if pattern else f"searched in {url}"
        elif query:
            text = f"searched for {query!r}"
        else:
            text = kind.replace("_", " ") or "searched the web"
    else:
        text = "searched the web"
    return ActivityRecord("web_search", _cut(text), None, _str(p.get("id")), tuple(details), p)


def plan(item: JsonObject, turn_id: str | None) -> ActivityRecord | None:
    """``item_completed`` with a ``Plan`` item: the plan proposed in plan mode."""
    text = _str(item.get("text")) or ""
    return ActivityRecord("plan", _cut(text), turn_id, None, (), item) if text.strip() else None


def compaction(p: JsonObject) -> ActivityRecord:
    """A ``compacted`` record: Codex replaced the history with a summary."""
    return ActivityRecord("compaction", "the conversation history was compacted", None, None, (), p)


def user_shell(text: str, p: JsonObject) -> ActivityRecord | None:
    """The ``<user_shell_command>`` message Codex records for a user's ``!command``."""
    parts = {match["tag"]: match["body"] for match in _TAG.finditer(text)}
    command = parts.get("command", "").strip()
    if not command:
        return None
    result = parts.get("result")
    if result is None:  # a result without its closing tag (the record was cut): the rest of the text
        _, _, result = text.partition("<result>")
    details: list[tuple[str, str | int | bool]] = []
    exit_code = re.search(r"^Exit code:\s*(-?\d+)", result, re.M)
    if exit_code:
        details.append(("exit_code", int(exit_code[1])))
    _, sep, output = result.partition("Output:\n")
    shown = f"!{command}" + (f"\n{output.rstrip()}" if sep and output.strip() else "")
    return ActivityRecord("user_shell", _cut(shown), None, None, tuple(details), p)


def patch_applied(p: JsonObject) -> ActivityRecord:
    """``patch_apply_end``: which files a patch changed, and whether it applied."""
    changes = p.get("changes")
    files = sorted(str(name) for name in changes) if isinstance(changes, dict) else []
    ok = p.get("success") is not False
    verb = "applied a patch" if ok else "a patch failed to apply"
    text = f"{verb}: {', '.join(files)}" if files else verb
    stderr = _str(p.get("stderr")) or ""
    if not ok and stderr.strip():
        text += f"\n{stderr.strip()}"
    return ActivityRecord("patch", _cut(text), _str(p.get("turn_id")), _str(p.get("call_id")), (("success", ok),), p)


def image_generated(p: JsonObject) -> ActivityRecord:
    """``response_item/image_generation_call``: the prompt it used (the image itself, its base64
    ``result``, goes out as a ``file`` entry: :class:`~coven_codex.rollout.translator.GeneratedImage`)."""
    prompt = _str(p.get("revised_prompt")) or ""
    text = f"generated an image: {prompt}" if prompt else "generated an image"
    return ActivityRecord("image", _cut(text), None, _str(p.get("id")), (), p)


def review_finished(p: JsonObject) -> ActivityRecord | None:
    """``exited_review_mode``: the review's verdict and the titles of its findings, on one line
    (0.135 also writes the findings in full as the review turn's ``agent_message``)."""
    output = p.get("review_output")
    if not isinstance(output, dict):
        return None
    findings = output.get("findings")
    titles = [
        str(finding["title"])
        for finding in (findings if isinstance(findings, list) else [])
        if isinstance(finding, dict) and isinstance(finding.get("title"), str)
    ]
    verdict = _str(output.get("overall_correctness")) or "review finished"
    count = f"{len(titles)} finding{'s' if len(titles) != 1 else ''}"
    text = f"{verdict}: {count}" + (f" ({'; '.join(titles)})" if titles else "")
    return ActivityRecord("review", _cut(text), None, None, (), p)


_COLLAB_VERBS: dict[str, str] = {
    "collab_agent_spawn_end": "started a sub-agent",
    "collab_agent_interaction_end": "wrote to a sub-agent",
    "collab_waiting_end": "waited for sub-agents",
    "collab_close_end": "closed a sub-agent",
    "collab_resume_end": "resumed a sub-agent",
}
COLLAB_EVENTS: frozenset[str] = frozenset(_COLLAB_VERBS)


def subagent(event_type: str, p: JsonObject) -> ActivityRecord:
    """A ``collab_*_end`` event: sub-agent activity (the sub-agent's own work is in its own rollout)."""
    verb = _COLLAB_VERBS.get(event_type, event_type.removeprefix("collab_").replace("_", " "))
    who = _str(p.get("new_agent_nickname")) or _str(p.get("new_thread_id")) or _str(p.get("receiver_thread_id"))
    role = _str(p.get("new_agent_role"))
    prompt = _str(p.get("prompt"))
    text = verb + (f" {who}" if who else "") + (f" ({role})" if role else "") + (f": {prompt}" if prompt else "")
    details: list[tuple[str, str | int | bool]] = []
    thread = _str(p.get("new_thread_id")) or _str(p.get("receiver_thread_id"))
    if thread:
        details.append(("agent_thread_id", thread))
    return ActivityRecord("subagent", _cut(text), _str(p.get("turn_id")), _str(p.get("call_id")), tuple(details), p)


_GUARDIAN_VERBS: dict[str, str] = {
    "approved": "auto-review approved",
    "denied": "auto-review denied",
    "timed_out": "auto-review timed out on",
    "aborted": "auto-review aborted for",
}


def _guardian_action(action: Any) -> str:
    """What an auto-review (guardian) assessed, in a few words (``GuardianAssessmentAction``)."""
    if not isinstance(action, dict):
        return "an action"
    kind = _str(action.get("type")) or ""
    if kind == "command":
        return f"the command {_str(action.get('command')) or ''}".rstrip()
    if kind == "execve":
        argv = action.get("argv")
        words = " ".join(str(a) for a in argv) if isinstance(argv, list) else _str(action.get("program")) or ""
        return f"the command {words}".rstrip()
    if kind == "apply_patch":
        files = action.get("files")
        names = ", ".join(str(f) for f in files) if isinstance(files, list) else ""
        return f"a patch to {names}" if names else "a patch"
    if kind == "network_access":
        return f"network access to {_str(action.get('target')) or _str(action.get('host')) or 'a host'}"
    if kind == "mcp_tool_call":
        return f"the MCP tool {_str(action.get('server')) or '?'}.{_str(action.get('tool_name')) or '?'}"
    if kind == "request_permissions":
        return "a permission request"
    return kind.replace("_", " ") or "an action"


def guardian_assessed(p: JsonObject) -> ActivityRecord | None:
    """``guardian_assessment``: the auto-reviewer's verdict on an action that needed approval
    (``approvals_reviewer = "auto_review"``); ``None`` while it is ``in_progress`` (the verdict
    follows as another event with the same ``id``)."""
    status = _str(p.get("status")) or ""
    if status not in _GUARDIAN_VERBS:
        return None
    text = f"{_GUARDIAN_VERBS[status]} {_guardian_action(p.get('action'))}"
    risk = _str(p.get("risk_level"))
    if risk:
        text += f" (risk: {risk})"
    rationale = _str(p.get("rationale"))
    if rationale:
        text += f": {rationale}"
    details: list[tuple[str, str | int | bool]] = [("status", status)]
    if risk:
        details.append(("risk_level", risk))
    turn_id = _str(p.get("turn_id")) or None
    return ActivityRecord("guardian", _cut(text), turn_id, None, tuple(details), p)


def goal_updated(p: JsonObject) -> ActivityRecord | None:
    """``thread_goal_updated``: the thread's goal was set or changed (``thread/goal/set`` or the
    model's ``create_goal`` / ``update_goal``): its objective and status."""
    goal = p.get("goal")
    if not isinstance(goal, dict):
        return None
    objective = _str(goal.get("objective")) or ""
    status = _str(goal.get("status")) or ""
    text = f"goal: {objective}" + (f" ({status})" if status else "")
    details: tuple[tuple[str, str | int | bool], ...] = (("status", status),) if status else ()
    return ActivityRecord("goal", _cut(text), _str(p.get("turnId")) or _str(p.get("turn_id")), None, details, p)


def thread_named(p: JsonObject) -> ActivityRecord | None:
    """``thread_name_updated``: the thread was given a name (a title)."""
    name = _str(p.get("thread_name"))
    if name is None:
        return None
    return ActivityRecord("thread_name", _cut(f"thread named {name!r}"), None, None, (("name", name),), p)


def undo_completed(p: JsonObject) -> ActivityRecord:
    """``undo_completed`` (``/undo``, releases with ghost snapshots): whether the workspace was
    restored, and Codex's message."""
    ok = p.get("success") is not False
    message = _str(p.get("message")) or ""
    text = ("undid the last turn's changes" if ok else "undo failed") + (f": {message}" if message else "")
    return ActivityRecord("undo", _cut(text), None, None, (("success", ok),), p)


def rolled_back(p: JsonObject) -> ActivityRecord:
    """``thread_rolled_back``: the last turns were dropped from the thread's history (the
    files they changed are not restored)."""
    turns = p.get("num_turns")
    count = turns if isinstance(turns, int) and not isinstance(turns, bool) else None
    text = "the history was rolled back" + (f" by {count} turn{'s' if count != 1 else ''}" if count is not None else "")
    details: tuple[tuple[str, str | int | bool], ...] = (("turns", count),) if count is not None else ()
    return ActivityRecord("rollback", text, None, None, details, p)


def inter_agent_message(p: JsonObject) -> ActivityRecord | None:
    """An ``inter_agent_communication`` record: a message between agents of a multi-agent
    thread (``author`` → ``recipient``, agent paths such as ``/root/worker``)."""
    content = _str(p.get("content"))
    if content is None:
        return None
    author, recipient = _str(p.get("author")) or "?", _str(p.get("recipient")) or "?"
    details: tuple[tuple[str, str | int | bool], ...] = (("author", author), ("recipient", recipient))
    return ActivityRecord("agent_message", _cut(f"{author} → {recipient}: {content}"), None, None, details, p)
