"""Merging coven's keys into the user's Codex config: comments kept, result verified."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
import tomlkit
from hypothesis import given, settings
from hypothesis import strategies as st

from coven_codex.codex.config_merge import ConfigMergeError, ConfigPatch, first_difference, merge_config

MCP = {"command": "python3", "args": ["-m", "mcp_shim"], "env": {"COVEN_SECRET": "s"}}
WS = "/work/space with.dots"


def coven_patch() -> ConfigPatch:
    return ConfigPatch(
        replace={("mcp_servers", "coven"): MCP},
        assign={("projects", WS, "trust_level"): "trusted"},
        defaults={("approval_policy",): "on-request", ("sandbox_mode",): "workspace-write"},
    )


def expected_after(base: dict[str, Any]) -> dict[str, Any]:
    data = tomllib.loads(tomlkit.dumps(base))
    data.setdefault("mcp_servers", {})["coven"] = MCP
    data.setdefault("projects", {}).setdefault(WS, {})["trust_level"] = "trusted"
    data.setdefault("approval_policy", "on-request")
    data.setdefault("sandbox_mode", "workspace-write")
    return data


USER_CONFIG = """\
# My Codex config -- keep this comment
model = "gpt-5"   # the model I like
approval_policy = "untrusted"  # mine, must win over coven's default

# providers
[model_providers.local]
name = "local"
base_url = "http://127.0.0.1:1/v1"  # port
env_key = "LOCAL_KEY"

[mcp_servers.other]
command = "other-server"  # another MCP server
[mcp_servers.coven]
command = "stale"
[mcp_servers.coven.env]
OLD = "1"

[profiles.fast]
model = "gpt-5-mini"
"""


def test_user_comments_tables_and_values_survive() -> None:
    merged = merge_config(USER_CONFIG, coven_patch())
    for line in USER_CONFIG.splitlines():
        if "coven" in line or line.startswith(('command = "stale"', "OLD")):
            continue
        assert line in merged, line
    data = tomllib.loads(merged)
    assert data["approval_policy"] == "untrusted"
    assert data["sandbox_mode"] == "workspace-write"
    assert data["mcp_servers"]["coven"] == MCP  # replaced wholesale: no stale OLD env
    assert data["mcp_servers"]["other"] == {"command": "other-server"}
    assert data["projects"][WS] == {"trust_level": "trusted"}
    assert data["profiles"]["fast"]["model"] == "gpt-5-mini"


@pytest.mark.parametrize(
    "base",
    [
        "",
        'model = "m"\nmcp_servers.other.command = "x"\nprojects."/a".trust_level = "trusted"\n',
        'projects = { "/a" = { trust_level = "trusted" } }\n',
        '[projects]\n"/a" = { trust_level = "trusted" }\n[tui]\nx = 1\n',
        'mcp_servers = { coven = { command = "old", env = { A = "1" } } }\n',
        '[mcp_servers.coven]\ncommand = "old"\n[after]\nx = 1\n',
        f'[projects."{WS}"]\ntrust_level = "untrusted" # mine\nextra = 1\n',
        'sandbox_mode = "danger-full-access"\n',
    ],
)
def test_awkward_layouts_merge_to_the_intended_data(base: str) -> None:
    merged = merge_config(base, coven_patch())
    data = tomllib.loads(merged)
    expected = expected_after(tomllib.loads(base))
    assert first_difference(data, expected) is None, merged


def test_existing_keys_are_replaced_not_duplicated() -> None:
    merged = merge_config(f'[projects."{WS}"]\ntrust_level = "untrusted" # mine\n', coven_patch())
    assert merged.count("trust_level") == 1
    assert "# mine" in merged


def test_invalid_base_is_reported() -> None:
    with pytest.raises(ConfigMergeError, match="not valid TOML"):
        merge_config("model = \n", coven_patch())


def test_a_change_that_cannot_be_represented_names_the_key() -> None:
    # `mcp_servers` is a string: neither a new table nor tomlkit can put coven under it
    with pytest.raises(ConfigMergeError) as info:
        merge_config('mcp_servers = "nope"\n', ConfigPatch(assign={("mcp_servers", "coven", "x"): 1}))
    assert info.value.key == ("mcp_servers", "coven", "x")
    assert "mcp_servers.coven.x" in str(info.value)


def test_update_from_nested_dict() -> None:
    patch = ConfigPatch()
    patch.update_from({"model": "m", "model_providers": {"local": {"base_url": "u", "env_key": "K"}}})
    merged = merge_config('model = "old" # c\n', patch)
    assert tomllib.loads(merged) == {"model": "m", "model_providers": {"local": {"base_url": "u", "env_key": "K"}}}
    assert "# c" in merged


def test_first_difference() -> None:
    assert first_difference({"a": {"b": 1}}, {"a": {"b": 1}}) is None
    assert first_difference({"a": {"b": 1}}, {"a": {"b": 2}}) == ("a", "b")
    assert first_difference({"a": {}}, {}) is None
    assert first_difference({"x": 1}, {}) == ("x",)


# -- property: whatever layout the user's TOML uses, the merge says exactly what was intended --
keys = st.sampled_from(["a", "b", "mcp_servers", "projects", "coven", "x.y", "trust_level", "q r"])
scalars = st.one_of(st.integers(-5, 5), st.text("abc", max_size=3), st.booleans())
tables: st.SearchStrategy[dict[str, Any]] = st.recursive(
    st.dictionaries(keys, scalars, max_size=3),
    lambda inner: st.dictionaries(keys, st.one_of(scalars, inner), max_size=3),
    max_leaves=10,
)


def render(data: dict[str, Any], style: int, prefix: tuple[str, ...] = ()) -> str:
    """Render ``data`` as TOML using headers (0), dotted keys (1) or inline tables (2)."""
    if style == 1:
        lines = []
        for path, value in leaves(data):
            lines.append(f"{'.'.join(tomlkit.key(p).as_string() for p in path)} = {tomlkit.item(value).as_string()}")
        return "\n".join(lines) + "\n"
    if style == 2:
        return "".join(f"{tomlkit.key(k).as_string()} = {tomlkit.item(v).as_string()}  # c\n" for k, v in data.items())
    return tomlkit.dumps(data)


def leaves(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            if not value:
                continue
            out.extend(leaves(value, (*prefix, key)))
        else:
            out.append(((*prefix, key), value))
    return out


@settings(max_examples=150, deadline=None)
@given(tables, st.integers(0, 2))
def test_merge_never_silently_corrupts(base: dict[str, Any], style: int) -> None:
    text = render(base, style)
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    try:
        merged = merge_config(text, coven_patch())
    except ConfigMergeError:
        return  # refusing is allowed; producing the wrong data is not
    intended: dict[str, Any] = parsed
    # compute what was intended with plain dicts
    servers = intended.setdefault("mcp_servers", {})
    if not isinstance(servers, dict):
        pytest.fail("merge succeeded although mcp_servers is not a table")
    servers["coven"] = MCP
    projects = intended.setdefault("projects", {})
    assert isinstance(projects, dict)
    projects.setdefault(WS, {})
    assert isinstance(projects[WS], dict)
    projects[WS]["trust_level"] = "trusted"
    intended.setdefault("approval_policy", "on-request")
    intended.setdefault("sandbox_mode", "workspace-write")
    assert first_difference(tomllib.loads(merged), intended) is None
