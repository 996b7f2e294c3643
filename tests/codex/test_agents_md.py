"""AGENTS.md templates: $VARNAME substitution rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coven_codex.codex.agents_md import TemplateError, render_template, write_agents_md


def test_substitutes_uppercase_names() -> None:
    out = render_template("Work in $WORKSPACE_DIR on $PROJECT_2.", {"WORKSPACE_DIR": "/w", "PROJECT_2": "p"})
    assert out == "Work in /w on p."


@pytest.mark.parametrize(
    "text",
    ["math: $L$ and $x$", "$lower stays", "price $5", "a lone $ sign", "$A alone", "$Mixed", "$FOOlower"],
)
def test_non_variables_are_left_alone(text: str) -> None:
    assert render_template(text, {}) == text


def test_unknown_variables_are_named_in_order() -> None:
    with pytest.raises(TemplateError) as info:
        render_template("$ZED and $ALPHA and $ZED", {"WORKSPACE_DIR": "/w"})
    message = str(info.value)
    assert "$ZED, $ALPHA" in message
    assert "agents_vars" in message


def test_double_dollar_escapes() -> None:
    assert render_template("literal $$HOME, value $HOME", {"HOME": "/h"}) == "literal $HOME, value /h"


def test_bad_variable_names_are_rejected() -> None:
    with pytest.raises(TemplateError, match="'lower'"):
        render_template("x", {"lower": "v"})


def test_write_agents_md(tmp_path: Path) -> None:
    template = tmp_path / "agents.tmpl"
    template.write_text("Workspace: $WORKSPACE_DIR\nTeam: $TEAM\nFormula $E$ = mc^2\n")
    home = tmp_path / "home"
    home.mkdir()
    ws = tmp_path / "ws"
    path = write_agents_md(template, home, ws, {"TEAM": "blue"})
    assert path == home / "AGENTS.md"
    assert path.read_text() == f"Workspace: {ws.resolve()}\nTeam: blue\nFormula $E$ = mc^2\n"


def test_write_agents_md_missing_template(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="does not exist"):
        write_agents_md(tmp_path / "missing", tmp_path, tmp_path, {})


def test_write_agents_md_names_the_template_on_error(tmp_path: Path) -> None:
    template = tmp_path / "t.md"
    template.write_text("$NOPE")
    with pytest.raises(TemplateError, match=r"t\.md.*\$NOPE"):
        write_agents_md(template, tmp_path, tmp_path, {})


# -- properties ------------------------------------------------------------------------------

names = st.from_regex(r"[A-Z][A-Z0-9_]{1,8}", fullmatch=True)
plain = st.text(alphabet=st.characters(blacklist_characters="$"), max_size=30)


@given(plain)
def test_text_without_dollars_is_unchanged(text: str) -> None:
    assert render_template(text, {}) == text


@given(st.lists(st.tuples(plain, names), min_size=1, max_size=5), st.text("xyz", max_size=5))
def test_every_used_variable_is_substituted_or_named(parts: list[tuple[str, str]], value: str) -> None:
    template = "".join(f"{text} ${name} " for text, name in parts)
    values = {name: value for _, name in parts}
    rendered = render_template(template, values)
    assert rendered == "".join(f"{text} {value} " for text, _ in parts)
    missing = parts[-1][1]
    del values[missing]
    if all(name != missing for _, name in parts[:-1]):
        with pytest.raises(TemplateError, match=rf"\${missing}\b"):
            render_template(template, values)
