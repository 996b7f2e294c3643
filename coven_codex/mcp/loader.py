"""Loading spells named ``module:object`` (command line ``--spells`` and ``coven.toml`` ``spells``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from coven_codex.mcp.names import SpellDefinitionError
from coven_codex.mcp.registry import SpellRegistry


class SpellLoadError(ValueError):
    """A ``module:object`` spell source cannot be loaded; the message says why and what to do."""


def load_spells(
    source: str,
    *,
    search_paths: Iterable[Path] = (),
    registry: SpellRegistry | None = None,
) -> SpellRegistry:
    """Import ``module:object`` and return a registry holding its spells.

    ``object`` may be a function, a list or tuple of functions, or a :class:`SpellRegistry`
    (dotted attribute paths such as ``tools.registry`` work). With ``registry`` given, the
    spells are added to it. ``search_paths`` are put in front of ``sys.path`` for the import,
    like the current directory is for ``python -m``.
    """
    target = registry if registry is not None else SpellRegistry()
    obj = _resolve(source, search_paths)
    try:
        if isinstance(obj, SpellRegistry):
            target.include(obj)
        elif isinstance(obj, list | tuple):
            for item in obj:
                _register_function(target, item, source)
        else:
            _register_function(target, obj, source)
    except SpellDefinitionError as exc:
        raise SpellLoadError(f"spells from {source!r}: {exc}") from None
    return target


def load_spell_sources(sources: Iterable[str], *, search_paths: Iterable[Path] = ()) -> SpellRegistry:
    """One registry with the spells of every source (duplicate names across sources refused)."""
    registry = SpellRegistry()
    paths = list(search_paths)
    for source in sources:
        load_spells(source, search_paths=paths, registry=registry)
    return registry


def _register_function(registry: SpellRegistry, item: object, source: str) -> None:
    if isinstance(item, SpellRegistry):
        registry.include(item)
        return
    if not callable(item):
        raise SpellLoadError(
            f"spells from {source!r}: {item!r} is not a function; export a function, a list of "
            "functions or a SpellRegistry"
        )
    function: Callable[..., Any] = item
    registry.register(function)


def _resolve(source: str, search_paths: Iterable[Path]) -> object:
    module_name, sep, attribute = source.partition(":")
    if not sep or not module_name or not attribute:
        raise SpellLoadError(
            f"spell source {source!r} is not of the form module:object (for example myspells:spells)"
        )
    added = list(dict.fromkeys(str(Path(p).resolve()) for p in search_paths))
    for path in reversed(added):
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise SpellLoadError(
                f"spell source {source!r}: no module named {module_name!r} "
                f"(looked in {', '.join(added) or 'sys.path'}); check the name or run from its directory"
            ) from None
        raise SpellLoadError(f"spell source {source!r}: importing it failed: {exc}") from None
    except Exception as exc:
        raise SpellLoadError(
            f"spell source {source!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    obj: object = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SpellLoadError(
                f"spell source {source!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    return obj
