"""Loading spells named ``module:object`` (command line ``--spells`` and ``coven.toml`` ``spells``).

``run``, ``validate`` and ``spells`` all load the configured spells through
:func:`load_configured_spells`, so they find the same modules: the search path is
:func:`spell_search_path` (the current directory, like ``python -m``, then ``PYTHONPATH`` and the
installed packages), with every entry that lies inside the workspace left out. Codex writes to the
workspace, so a module there must never run inside the daemon: a spell module (or one of its parent
packages) that would be found in the workspace is refused with a message saying to move it or to
install it as a package, before anything is imported.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
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
        raise SpellLoadError(f"spell source {source!r} is not of the form module:object (for example myspells:spells)")
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


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _entry_path(entry: str, cwd: Path) -> Path:
    return (cwd / entry).resolve() if entry else cwd.resolve()


def spell_search_path(workspace: Path, cwd: Path | None = None) -> list[Path]:
    """Where spell modules are looked up: ``cwd`` (default the current directory), then ``sys.path``
    (``PYTHONPATH``, site-packages), leaving out every entry that resolves inside ``workspace``."""
    here = (cwd or Path.cwd()).resolve()
    root = workspace.expanduser().resolve()
    found: list[Path] = []
    for entry in [str(here), *sys.path]:
        path = _entry_path(entry, here)
        if not _inside(path, root) and path not in found:
            found.append(path)
    return found


def _use_search_path(root: Path, cwd: Path) -> list[Path]:
    """Make ``sys.path`` the spell search path, for good (the daemon never imports from the workspace,
    not even later): drop every entry inside the workspace, put ``cwd`` first; return what was dropped."""
    removed = [entry for entry in sys.path if _inside(_entry_path(entry, cwd), root)]
    sys.path[:] = [entry for entry in sys.path if entry not in removed]
    if not _inside(cwd, root) and str(cwd) not in sys.path:
        sys.path.insert(0, str(cwd))
    importlib.invalidate_caches()
    dropped = [_entry_path(entry, cwd) for entry in removed]
    return dropped if not _inside(cwd, root) else [cwd, *dropped]


def _location(spec: importlib.machinery.ModuleSpec) -> list[Path]:
    places = [Path(spec.origin)] if spec.origin and os.path.isabs(spec.origin) else []
    places += [Path(p) for p in spec.submodule_search_locations or ()]
    return [p.resolve() for p in places]


def _refuse_if_in_workspace(source: str, name: str, spec: importlib.machinery.ModuleSpec | None, root: Path) -> None:
    for place in _location(spec) if spec is not None else []:
        if _inside(place, root):
            raise SpellLoadError(
                f"spell source {source!r}: module {name!r} is inside the workspace ({place}); coven-codex "
                "never imports code from the folder Codex writes to. Move it outside the workspace, or "
                "install it as a package (pip install), and run from there"
            )


def _check_module(source: str, root: Path, removed: list[Path]) -> None:
    """Refuse ``source`` if its module or a parent package would come from the workspace."""
    module_name = source.partition(":")[0]
    parts = module_name.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        loaded = sys.modules.get(name)
        try:
            spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return  # importing it reports the problem
        if spec is None and depth == 1 and removed:
            # Not found on the search path: say so plainly if it is a module in the workspace.
            spec = importlib.machinery.PathFinder.find_spec(name, [str(p) for p in removed])
            _refuse_if_in_workspace(source, name, spec, root)
            return
        _refuse_if_in_workspace(source, name, spec, root)
        if spec is None:
            return


def load_configured_spells(sources: Iterable[str], *, workspace: Path, cwd: Path | None = None) -> SpellRegistry:
    """The spells of ``run``, ``validate`` and ``spells``: every source loaded from
    :func:`spell_search_path`, refusing any module that lies inside ``workspace``."""
    here = (cwd or Path.cwd()).resolve()
    root = workspace.expanduser().resolve()
    sources = list(sources)
    removed = _use_search_path(root, here)
    for source in sources:
        if source.partition(":")[0]:
            _check_module(source, root, removed)
    return load_spell_sources(sources, search_paths=[] if _inside(here, root) else [here])
