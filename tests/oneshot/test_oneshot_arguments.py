"""Codex's arguments pass through unchanged, except the refused flags and ``--json`` added for exec."""

from __future__ import annotations

import pytest

from coven_codex.oneshot.arguments import ArgumentError, parse_codex_arguments


@pytest.mark.parametrize(
    "given",
    [
        ["exec", "-C", "/elsewhere", "hi"],
        ["exec", "--cd", "/elsewhere", "hi"],
        ["exec", "--cd=/elsewhere", "hi"],
        ["-C/elsewhere", "exec", "hi"],
        ["exec", "hi", "--cd", "/elsewhere"],
        ["--cd", "/x"],
    ],
)
def test_cd_is_refused_with_the_reason(given: list[str]) -> None:
    with pytest.raises(ArgumentError, match=r"(-C|--cd) is refused: Codex always runs in --workspace"):
        parse_codex_arguments(given)


@pytest.mark.parametrize("given", [["exec", "--json", "hi"], ["exec", "hi", "--json"], ["--json"]])
def test_json_is_refused_with_the_reason(given: list[str]) -> None:
    with pytest.raises(ArgumentError, match="--json is refused: coven-codex exec adds --json itself"):
        parse_codex_arguments(given)


def test_exec_gets_json_and_everything_else_is_unchanged() -> None:
    given = ["-c", "model=m", "exec", "-m", "m", "--skip-git-repo-check", "say --json -C x", "-o", "last.txt"]
    parsed = parse_codex_arguments(given)
    assert parsed.exec_mode
    assert parsed.command() == ["-c", "model=m", "exec", "--json", *given[3:]]
    assert parsed.resume("T", "again") == [
        "-c",
        "model=m",
        "exec",
        "--json",
        "-m",
        "m",
        "--skip-git-repo-check",
        "resume",
        "T",
        "again",
    ]
    assert parsed.resume(None, "again")[-3:] == ["resume", "--last", "again"]


def test_values_and_positionals_are_never_taken_for_flags() -> None:
    # -c's value, a prompt after `--`, and a value that looks like a flag are not refused
    assert parse_codex_arguments(["exec", "-c", "--json", "--", "-C"]).command() == [
        "exec",
        "--json",
        "-c",
        "--json",
        "--",
        "-C",
    ]


@pytest.mark.parametrize("given", [["login", "status"], ["hello exec"], ["mcp", "list", "exec"], []])
def test_other_modes_pass_through_untouched(given: list[str]) -> None:
    parsed = parse_codex_arguments(given)
    assert not parsed.exec_mode
    assert parsed.command() == given
