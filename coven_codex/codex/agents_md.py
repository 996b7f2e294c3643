"""``AGENTS.md`` from a prompt template with ``$VARNAME`` substitution.

A variable is ``$`` followed by an uppercase letter, then at least one more uppercase letter,
digit or ``_`` (``$WORKSPACE_DIR``, ``$PROJECT``), not followed by a letter, digit or ``_``.
Anything else is text: single letters such as ``$L$`` in formulas, ``$lower``, ``$1``, a lone
``$``. ``$$NAME`` writes a literal ``$NAME``. ``$WORKSPACE_DIR`` is always provided (the
workspace's absolute path); the user's variables may add to it or override it. A variable the
template uses but nobody provided is an error naming it (every such name, in order).

The file is written to ``$CODEX_HOME/AGENTS.md``, where Codex reads its global instructions:
the isolated home belongs to the bridge, so the workspace's own ``AGENTS.md`` is never touched
(Codex reads that one too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

VARIABLE_RE = re.compile(r"(\$?)\$([A-Z][A-Z0-9_]+)(?![A-Za-z0-9_])")
NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]+$")
AGENTS_FILE = "AGENTS.md"
DAEMON_OPTIONS = ("agents_template", "agents_vars in coven.toml")
"""How the daemon's settings name the template and the variables, for messages (``coven-codex exec``
passes its own flags)."""


class TemplateError(ValueError):
    """The template cannot be rendered; the message names what is missing or wrong."""


def builtin_variables(workspace: Path) -> dict[str, str]:
    """The variables every template gets: ``WORKSPACE_DIR``, the workspace's absolute path."""
    return {"WORKSPACE_DIR": str(workspace.expanduser().resolve())}


def render_template(template: str, variables: Mapping[str, str], *, vars_option: str = DAEMON_OPTIONS[1]) -> str:
    """Substitute ``$VARNAME`` occurrences; raise :class:`TemplateError` for unknown ones.

    ``vars_option`` names where the user gives variables, for the messages."""
    bad = [name for name in variables if not NAME_RE.fullmatch(name)]
    if bad:
        raise TemplateError(
            f"variable names {', '.join(map(repr, bad))} can never be substituted: a name must be "
            "an uppercase letter followed by uppercase letters, digits or '_' (at least 2 characters)"
        )
    missing: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        escaped, name = match.group(1), match.group(2)
        if escaped:
            return f"${name}"
        if name in variables:
            return variables[name]
        if name not in missing:
            missing.append(name)
        return match.group(0)

    rendered = VARIABLE_RE.sub(substitute, template)
    if missing:
        names = ", ".join(f"${name}" for name in missing)
        raise TemplateError(
            f"the AGENTS.md template uses {names} but no value was given; add "
            f"{'them' if len(missing) > 1 else 'it'} to {vars_option} (or write $$NAME "
            "for a literal $NAME)"
        )
    return rendered


def render_agents_md(
    template_path: Path,
    workspace: Path,
    variables: Mapping[str, str],
    *,
    options: tuple[str, str] = DAEMON_OPTIONS,
) -> str:
    """The text ``template_path`` renders to for ``workspace``; ``options`` name the template's and
    the variables' settings in messages."""
    try:
        template = template_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TemplateError(f"AGENTS.md template {template_path} does not exist; fix {options[0]}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(f"cannot read AGENTS.md template {template_path}: {exc}") from None
    values = {**builtin_variables(workspace), **variables}
    try:
        return render_template(template, values, vars_option=options[1])
    except TemplateError as exc:
        raise TemplateError(f"{template_path}: {exc}") from None


def write_agents_md(
    template_path: Path,
    codex_home: Path,
    workspace: Path,
    variables: Mapping[str, str],
    *,
    options: tuple[str, str] = DAEMON_OPTIONS,
) -> Path:
    """Render ``template_path`` into ``codex_home/AGENTS.md`` (atomically); return its path."""
    rendered = render_agents_md(template_path, workspace, variables, options=options)
    target = codex_home / AGENTS_FILE
    partial = target.with_name(f".{AGENTS_FILE}.tmp")
    partial.write_text(rendered, encoding="utf-8")
    os.replace(partial, target)
    return target
