"""A conversation's settings chosen from the chat (``/project``, ``/model``, ``/mode``), checked against the
operator's configuration (docs/configuration.md, *Settings from the chat*).

The operator names what a chat may choose: ``[projects]`` (name → a directory inside the workspace or a
``workspace_roots`` entry, checked at start and again on use), ``models`` and ``modes`` (allow-lists; empty:
nothing to choose). A value outside them is refused with what is allowed. Nothing under the workspace is
read as configuration: the choices come from the daemon's settings alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from coven_codex.agent.thread_options import OptionsRefused, check_cwd
from coven_codex.entries import ConversationSettings
from coven_codex.settings import Settings
from coven_codex.support.limits import cut

SETTINGS_STATE = "settings"
"""The status answering a ``settings`` entry (it carries the conversation's settings)."""
CONFIG_HINT = "The daemon's operator sets them in coven.toml ([projects], models, modes; docs/configuration.md)."


@dataclass(frozen=True, slots=True)
class SettingRefused(Exception):
    """A chat asked for a value the operator does not allow: ``message`` says what, ``hint`` what is allowed."""

    message: str
    hint: str


def _allowed(names: list[str], what: str) -> str:
    return f"{what}: {', '.join(names)}" if names else f"no {what} are configured"


def check_change(change: ConversationSettings, settings: Settings) -> None:
    """:class:`SettingRefused` unless every value ``change`` gives is one the operator allows (a
    project's directory is checked on disk: call it off the event loop)."""
    if change.project is not None:
        path = settings.projects.get(change.project)
        if path is None:
            raise SettingRefused(
                f"there is no project {cut(change.project, 80)!r}",
                f"{_allowed(sorted(settings.projects), 'projects')}. {CONFIG_HINT}",
            )
        try:
            check_cwd(str(path), settings.cwd_roots)
        except OptionsRefused as exc:
            raise SettingRefused(f"project {change.project!r} cannot be used now: {exc}", CONFIG_HINT) from None
    if change.model is not None and change.model not in settings.models:
        raise SettingRefused(
            f"model {cut(change.model, 80)!r} is not allowed here",
            f"{_allowed(settings.models, 'models')}. {CONFIG_HINT}",
        )
    if change.mode is not None and change.mode not in settings.modes:
        raise SettingRefused(
            f"mode {cut(change.mode, 80)!r} is not allowed here",
            f"{_allowed(list(settings.modes), 'modes')}. {CONFIG_HINT}",
        )


def project_problems(settings: Settings) -> list[str]:
    """What is wrong with the operator's ``[projects]`` (each must be a directory inside the workspace or a
    ``workspace_roots`` entry), one line each; empty when nothing is. Reads the file system."""
    problems: list[str] = []
    for name, path in settings.projects.items():
        try:
            check_cwd(str(path), settings.cwd_roots)
        except OptionsRefused as exc:
            fix = "name a directory inside the workspace or a workspace_roots entry"
            problems.append(f"project {name!r} in [projects]: {exc}; {fix}")
    return problems


def merged(current: ConversationSettings, change: ConversationSettings) -> ConversationSettings:
    """``current`` with the values ``change`` gives."""
    return ConversationSettings(
        project=change.project if change.project is not None else current.project,
        model=change.model if change.model is not None else current.model,
        mode=change.mode if change.mode is not None else current.mode,
    )


def project_dir(chat: ConversationSettings, settings: Settings) -> str | None:
    """The checked directory of the chat's project (``None``: none chosen, or no longer usable)."""
    if chat.project is None or chat.project not in settings.projects:
        return None
    try:
        return check_cwd(str(settings.projects[chat.project]), settings.cwd_roots)
    except OptionsRefused:
        return None


def describe(chat: ConversationSettings, settings: Settings) -> str:
    """The settings now and what may be chosen (the answer to ``/project``, ``/model``, ``/mode`` alone)."""
    project = f"{chat.project} ({settings.projects[chat.project]})" if chat.project in settings.projects else None
    lines = (
        ("project", project or "none (the daemon's workspace)", _allowed(sorted(settings.projects), "projects")),
        ("model", chat.model or "Codex's default", _allowed(settings.models, "models")),
        ("mode", chat.mode or "the daemon's", _allowed(list(settings.modes), "modes")),
    )
    return "\n".join(f"{name}: {now}; {allowed}" for name, now, allowed in lines)
