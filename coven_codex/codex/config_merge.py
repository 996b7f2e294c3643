"""Merging coven's settings into the user's Codex ``config.toml`` without losing their text.

The user's base config is edited, never regenerated: every comment, table and key order they
wrote survives. Changes are described as a :class:`ConfigPatch` of key *paths* (tuples, so a
project path with dots in it is one key):

- ``replace``: path -> value; a dict value replaces the whole table (our MCP server entry);
- ``assign``: path -> scalar/array; set a single key, creating its tables as needed (a trust
  entry for the workspace);
- ``defaults``: like ``assign``, but only where the user has not set the key (approvals).

Each change is applied on its own and the text re-parsed with :mod:`tomllib` and compared with
the intended data (a plain-dict computation) before the next one: tomlkit has known bugs with
dotted keys (a new table can swallow a dotted key that follows it), so nothing it produces is
trusted unchecked. A key whose table does not exist yet is appended as a fresh ``[table]`` at
the end of the document, which cannot disturb what is there; if that is not valid TOML (the
parent is an inline table, say) tomlkit inserts it instead. If neither gives the intended data,
:class:`ConfigMergeError` names the key that did not survive.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import tomlkit
from tomlkit.container import Container
from tomlkit.items import InlineTable, Table

KeyPath = tuple[str, ...]


class ConfigMergeError(ValueError):
    """The merged config would not say what was intended; ``key`` names the offending key."""

    def __init__(self, key: KeyPath, reason: str) -> None:
        self.key = key
        if not key:
            super().__init__(f"cannot merge into the Codex config: {reason}; fix the base config and try again")
            return
        super().__init__(
            f"cannot merge key {format_key(key)} into the Codex config: {reason}; rewrite that part of the "
            "base config with plain [table] headers (no dotted keys or inline tables) and try again"
        )


@dataclass(slots=True)
class ConfigPatch:
    """What to change in the base config; see the module docstring."""

    replace: dict[KeyPath, Any] = field(default_factory=dict)
    assign: dict[KeyPath, Any] = field(default_factory=dict)
    defaults: dict[KeyPath, Any] = field(default_factory=dict)

    def update_from(self, data: Mapping[str, Any], prefix: KeyPath = ()) -> None:
        """Add every leaf of the nested dict ``data`` as an ``assign`` (tables merge, leaves win)."""
        for key, value in data.items():
            path = (*prefix, key)
            if isinstance(value, Mapping):
                self.update_from(value, path)
            else:
                self.assign[path] = value


def format_key(path: KeyPath) -> str:
    """``("projects", "/a.b", "trust_level")`` -> ``projects."/a.b".trust_level``."""
    return ".".join(tomlkit.key(part).as_string() for part in path)


def merge_config(base_text: str, patch: ConfigPatch) -> str:
    """Apply ``patch`` to the TOML ``base_text``; return the new text (verified with tomllib)."""
    text = base_text
    try:
        intended = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigMergeError((), f"the base config is not valid TOML ({exc})") from None
    for path, value in patch.replace.items():
        text, intended = _replace(text, intended, path, value)
    for path, value in patch.assign.items():
        text, intended = _assign(text, intended, path, value)
    for path, value in patch.defaults.items():
        if _lookup(intended, path) is _MISSING:
            text, intended = _assign(text, intended, path, value)
    return text


def first_difference(actual: Any, intended: Any, path: KeyPath = ()) -> KeyPath | None:
    """The first key path where two parsed TOML documents differ (``None`` if equal).

    An empty table and a missing one mean the same to Codex, so they are not a difference.
    """
    if isinstance(actual, dict) and isinstance(intended, dict):
        actual, intended = _without_empty(actual), _without_empty(intended)
        for key in [*intended, *(k for k in actual if k not in intended)]:
            if key not in actual or key not in intended:
                return (*path, key)
            found = first_difference(actual[key], intended[key], (*path, key))
            if found is not None:
                return found
        return None
    return None if actual == intended else path


def _without_empty(table: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in table.items() if not (isinstance(v, dict) and not _without_empty(v))}


class _Missing:
    pass


_MISSING = _Missing()


def _lookup(data: Mapping[str, Any], path: KeyPath) -> Any:
    node: Any = data
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _set_plain(data: dict[str, Any], path: KeyPath, value: Any, *, replace: bool = False) -> dict[str, Any]:
    result = copy.deepcopy(data)
    node = result
    for depth, part in enumerate(path[:-1], start=1):
        child = node.get(part, _MISSING)
        if child is _MISSING:
            child = {}
            node[part] = child
        elif not isinstance(child, dict):
            raise ConfigMergeError(
                path, f"{format_key(path[:depth])} is a {type(child).__name__} in the base config, not a table"
            )
        node = child
    leaf = path[-1]
    if replace or not isinstance(value, Mapping) or not isinstance(node.get(leaf), dict):
        node[leaf] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
    else:
        for key, inner in value.items():
            node[leaf] = _set_plain(node[leaf], (key,), inner)
    return result


Strategy = Callable[[str, KeyPath, Any], str]


def _replace(text: str, intended: dict[str, Any], path: KeyPath, value: Any) -> tuple[str, dict[str, Any]]:
    if not path:
        raise ConfigMergeError(path, "an empty key path cannot be replaced")
    if not isinstance(value, Mapping):
        return _assign(text, intended, path, value)
    exists = _lookup(intended, path) is not _MISSING
    target = _set_plain(intended, path, value, replace=True)
    strategies: list[Strategy] = [_tomlkit_insert, _delete_then_append] if exists else [_append_table, _tomlkit_insert]
    return _verified(text, path, target, strategies), target


def _assign(text: str, intended: dict[str, Any], path: KeyPath, value: Any) -> tuple[str, dict[str, Any]]:
    if not path:
        raise ConfigMergeError(path, "an empty key path cannot be assigned")
    if isinstance(value, Mapping):
        for key, inner in value.items():
            text, intended = _assign(text, intended, (*path, key), inner)
        return text, intended
    target = _set_plain(intended, path, value)
    exists = _lookup(intended, path) is not _MISSING
    parent_is_root = len(path) == 1
    strategies: list[Strategy] = [_tomlkit_insert] if exists or parent_is_root else [_append_table, _tomlkit_insert]
    return _verified(text, path, target, strategies), target


def _verified(text: str, path: KeyPath, target: dict[str, Any], strategies: list[Strategy]) -> str:
    """Try each strategy until one yields text that parses to exactly ``target``."""
    reasons: list[str] = []
    for strategy in strategies:
        try:
            candidate = strategy(text, path, _lookup(target, path))
            actual = tomllib.loads(candidate)
        except (tomllib.TOMLDecodeError, tomlkit.exceptions.TOMLKitError, KeyError, TypeError, ValueError) as exc:
            reasons.append(f"{type(exc).__name__}: {exc}")
            continue
        differs = first_difference(actual, target)
        if differs is None:
            return candidate
        reasons.append(f"the result changed {format_key(differs) or 'the document'}")
    raise ConfigMergeError(path, "; ".join(reasons))


def _append_table(text: str, path: KeyPath, value: Any) -> str:
    """Append ``[parent]`` (or ``[path]`` for a table value) at the end of the text."""
    if isinstance(value, Mapping):
        block = "".join(_render_table(path, value))
    else:
        header, leaf = path[:-1], path[-1]
        block = f"[{format_key(header)}]\n{tomlkit.key(leaf).as_string()} = {_render_value(value)}\n"
    separator = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return f"{text}{separator}{block}"


def _render_table(path: KeyPath, table: Mapping[str, Any]) -> Iterator[str]:
    yield f"[{format_key(path)}]\n"
    nested: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            nested.append((key, value))
        else:
            yield f"{tomlkit.key(key).as_string()} = {_render_value(value)}\n"
    for key, value in nested:
        yield "\n"
        yield from _render_table((*path, key), value)


def _render_value(value: Any) -> str:
    """A TOML value; tables inside arrays become inline tables."""
    if isinstance(value, Mapping):
        inner = ", ".join(f"{tomlkit.key(k).as_string()} = {_render_value(v)}" for k, v in value.items())
        return f"{{ {inner} }}" if inner else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_render_value(v) for v in value) + "]"
    return str(tomlkit.item(value).as_string())


def _tomlkit_insert(text: str, path: KeyPath, value: Any) -> str:
    """Set ``path`` through tomlkit's document model, creating missing tables."""
    doc = tomlkit.parse(text)
    node: Container | Table | InlineTable = doc
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, (Table, InlineTable)):
            node[part] = tomlkit.inline_table() if isinstance(node, InlineTable) else tomlkit.table()
            child = node[part]
        if not isinstance(child, (Table, InlineTable)):
            raise TypeError(f"{format_key(path)}: {part!r} is not a table")
        node = child
    node[path[-1]] = _to_item(value, inline=isinstance(node, InlineTable))
    return str(tomlkit.dumps(doc))


def _to_item(value: Any, *, inline: bool) -> Any:
    if isinstance(value, Mapping):
        table: Table | InlineTable = tomlkit.inline_table() if inline else tomlkit.table()
        for key, inner in value.items():
            table[key] = _to_item(inner, inline=inline)
        return table
    return value


def _delete_then_append(text: str, path: KeyPath, value: Any) -> str:
    """Remove the table at ``path`` through tomlkit, then append ``value`` as a fresh table."""
    doc = tomlkit.parse(text)
    node: Any = doc
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return _append_table(str(tomlkit.dumps(doc)), path, value)
