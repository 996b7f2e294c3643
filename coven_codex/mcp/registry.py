"""The spell registry: Python functions that Codex sees as MCP tools."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from coven_codex.mcp.names import SpellDefinitionError, check_tool_name
from coven_codex.mcp.schema import ArgumentPlan, ResultPlan, plan_arguments, plan_result

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TIMEOUT = 120.0
_OPTIONS_ATTRIBUTE = "__coven_spell__"


@dataclass(frozen=True, slots=True)
class SpellOptions:
    """What :func:`spell` (the module-level marker) records on a function."""

    name: str | None = None
    description: str | None = None
    title: str | None = None
    timeout: float | None = None
    annotations: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Spell:
    """One registered spell: the function and everything derived from it."""

    name: str
    function: Callable[..., Any]
    description: str
    title: str | None
    timeout: float
    is_async: bool
    arguments: ArgumentPlan
    result: ResultPlan
    annotations: Mapping[str, Any] | None = None
    definition: dict[str, Any] = field(default_factory=dict)
    noun: str = "spell"
    """What its messages call it (``spell``; the job tools are ``tool``)."""

    def tool_definition(self) -> dict[str, Any]:
        """The MCP ``Tool`` object for ``tools/list``."""
        return self.definition


def _build_spell(
    function: Callable[..., Any], options: SpellOptions, default_timeout: float, noun: str = "spell"
) -> Spell:
    if not callable(function):
        raise SpellDefinitionError(f"{function!r} is not callable, so it cannot be a spell")
    name = check_tool_name(options.name or str(getattr(function, "__name__", "")))
    timeout = default_timeout if options.timeout is None else options.timeout
    if not (timeout > 0 and not math.isnan(timeout)):
        raise SpellDefinitionError(f"spell {name!r}: timeout must be a positive number of seconds")
    description = options.description if options.description is not None else inspect.getdoc(function) or ""
    arguments = plan_arguments(function, name)
    result = plan_result(function, name)
    definition: dict[str, Any] = {"name": name}
    if options.title:
        definition["title"] = options.title
    if description:
        definition["description"] = description
    definition["inputSchema"] = arguments.schema
    if result.schema is not None:
        definition["outputSchema"] = result.schema
    if options.annotations:
        definition["annotations"] = dict(options.annotations)
    target = getattr(function, "__call__", None) if not inspect.isroutine(function) else function  # noqa: B004
    is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(target)
    return Spell(
        name=name,
        function=function,
        description=description,
        title=options.title,
        timeout=timeout,
        is_async=is_async,
        arguments=arguments,
        result=result,
        annotations=options.annotations,
        definition=definition,
        noun=noun,
    )


class SpellRegistry:
    """Spells by name. Register with :meth:`spell` (a decorator) or :meth:`register`.

    Names are unique: registering a second spell under a taken name raises
    :class:`SpellDefinitionError`.
    """

    def __init__(self, *, default_timeout: float = DEFAULT_TIMEOUT, noun: str = "spell") -> None:
        """``noun``: what the calls' messages name a function (``spell``, or ``tool`` for the job tools)."""
        if not default_timeout > 0:
            raise SpellDefinitionError("default_timeout must be a positive number of seconds")
        self.default_timeout = default_timeout
        self.noun = noun
        self._spells: dict[str, Spell] = {}

    def register(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        title: str | None = None,
        timeout: float | None = None,
        annotations: Mapping[str, Any] | None = None,
    ) -> Spell:
        """Register ``function``; options given here win over those of a :func:`spell` marker."""
        marked: SpellOptions = getattr(function, _OPTIONS_ATTRIBUTE, SpellOptions())
        options = SpellOptions(
            name=name or marked.name,
            description=description if description is not None else marked.description,
            title=title or marked.title,
            timeout=timeout if timeout is not None else marked.timeout,
            annotations=annotations if annotations is not None else marked.annotations,
        )
        spell = _build_spell(function, options, self.default_timeout, self.noun)
        self._add(spell)
        return spell

    @overload
    def spell(self, function: F, /) -> F: ...

    @overload
    def spell(
        self,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        title: str | None = None,
        timeout: float | None = None,
        annotations: Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]: ...

    def spell(
        self,
        function: F | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        title: str | None = None,
        timeout: float | None = None,
        annotations: Mapping[str, Any] | None = None,
    ) -> F | Callable[[F], F]:
        """Decorator: ``@registry.spell`` or ``@registry.spell(name=..., timeout=...)``."""

        def decorate(target: F) -> F:
            self.register(
                target,
                name=name,
                description=description,
                title=title,
                timeout=timeout,
                annotations=annotations,
            )
            return target

        return decorate(function) if function is not None else decorate

    def include(self, other: SpellRegistry) -> None:
        """Add every spell of ``other`` (duplicate names are refused)."""
        for spell in other:
            self._add(spell)

    def _add(self, spell: Spell) -> None:
        existing = self._spells.get(spell.name)
        if existing is not None:
            raise SpellDefinitionError(
                f"two spells are named {spell.name!r} ({_where(existing.function)} and "
                f"{_where(spell.function)}); rename one with name=..."
            )
        self._spells[spell.name] = spell

    def get(self, name: str) -> Spell | None:
        """The spell named ``name``, or ``None``."""
        return self._spells.get(name)

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Every spell's MCP tool definition (``tools/list``), in registration order."""
        return [spell.tool_definition() for spell in self._spells.values()]

    @property
    def longest_timeout(self) -> float:
        """The longest timeout of any spell (the registry default when there are none)."""
        return max((spell.timeout for spell in self._spells.values()), default=self.default_timeout)

    def __iter__(self) -> Iterator[Spell]:
        return iter(list(self._spells.values()))

    def __len__(self) -> int:
        return len(self._spells)

    def __contains__(self, name: object) -> bool:
        return name in self._spells


@overload
def spell(function: F, /) -> F: ...


@overload
def spell(
    *,
    name: str | None = None,
    description: str | None = None,
    title: str | None = None,
    timeout: float | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> Callable[[F], F]: ...


def spell(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    title: str | None = None,
    timeout: float | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> F | Callable[[F], F]:
    """Mark a function as a spell with options, without registering it anywhere.

    ``load_spells("module:object")`` and :meth:`SpellRegistry.register` honour the marks, so a
    module can simply export ``spells = [add, fetch]``.
    """

    def mark(target: F) -> F:
        options = SpellOptions(name, description, title, timeout, annotations)
        if name is not None:
            check_tool_name(name)
        setattr(target, _OPTIONS_ATTRIBUTE, options)
        return target

    return mark(function) if function is not None else mark


def _where(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", "?")
    qualname = getattr(function, "__qualname__", repr(function))
    return f"{module}:{qualname}"
