"""Spell signatures to JSON Schemas and back: argument validation and result conversion.

The input schema comes from the parameters' type hints through a pydantic model built for the
spell (``additionalProperties: false``; pydantic models and ``Annotated[..., Field(...)]`` are
honoured). The output schema exists only when the return type is structured, i.e. its JSON
Schema is an object (a pydantic model, a dataclass, a ``TypedDict``, a ``dict[str, ...]``).
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PydanticUserError,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic_core import to_jsonable_python

from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.names import SpellDefinitionError

_DEFS_PREFIX = "#/$defs/"


class ArgumentError(ValueError):
    """Arguments that do not match a spell's input schema; the message names each problem."""


class ResultError(ValueError):
    """A spell's return value does not match its declared return type."""


@dataclass(frozen=True, slots=True)
class _Parameter:
    name: str
    field: str
    positional_only: bool


@dataclass(frozen=True, slots=True)
class ArgumentPlan:
    """How JSON arguments become a call: validate with ``model``, then pass by parameter."""

    model: type[BaseModel]
    parameters: tuple[_Parameter, ...]
    context_parameter: str | None
    schema: dict[str, Any]

    def bind(self, arguments: Mapping[str, Any] | None) -> tuple[list[Any], dict[str, Any]]:
        """Validate ``arguments``; return positional and keyword arguments for the function.

        Validation is strict, as strict as the published schema: ``"2"`` is not an integer and
        ``true`` is not a number. It runs in JSON mode, where strings are still accepted for the
        types JSON has no literal for (dates, UUIDs, bytes, enums by value).
        """
        try:
            document = json.dumps(dict(arguments or {}), allow_nan=False)
            validated = self.model.model_validate_json(document, strict=True)
        except (ValueError, TypeError) as exc:  # ValidationError; or no JSON, from a Python caller
            if not isinstance(exc, ValidationError):
                raise ArgumentError(f"arguments: {exc}") from None
            raise ArgumentError(describe_validation_error(exc)) from None
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for parameter in self.parameters:
            value = getattr(validated, parameter.field)
            if parameter.positional_only:
                args.append(value)
            else:
                kwargs[parameter.name] = value
        return args, kwargs


@dataclass(frozen=True, slots=True)
class ResultPlan:
    """How a return value becomes MCP content: ``adapter`` checks it, ``schema`` if structured."""

    adapter: TypeAdapter[Any] | None
    schema: dict[str, Any] | None

    def to_content(self, value: Any) -> tuple[list[dict[str, Any]], Any | None]:
        """Return (content blocks, structuredContent or None) for a spell's return value."""
        if self.adapter is not None:
            try:
                value = self.adapter.validate_python(value)
            except ValidationError as exc:
                raise ResultError(describe_validation_error(exc)) from None
            plain = self.adapter.dump_python(value, mode="json")
        else:
            plain = to_jsonable_python(value, fallback=str)
        if self.schema is not None:
            return [_text(_dumps(plain))], plain
        if plain is None:
            return [], None
        if isinstance(plain, str):
            return [_text(plain)], None
        return [_text(_dumps(plain))], None


def describe_validation_error(exc: ValidationError) -> str:
    """The validation errors in one line: ``where: what`` for each, ``;``-separated."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def plan_arguments(function: Callable[..., Any], spell_name: str) -> ArgumentPlan:
    """Build the argument model and input schema of ``function`` (raises SpellDefinitionError)."""
    signature = _signature(function)
    hints = _type_hints(function)
    fields: dict[str, Any] = {}
    parameters: list[_Parameter] = []
    context_parameter: str | None = None
    for index, parameter in enumerate(signature.parameters.values()):
        annotation = hints.get(parameter.name, parameter.annotation)
        if _is_context(annotation):
            context_parameter = parameter.name
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise SpellDefinitionError(
                f"spell {spell_name!r}: *{parameter.name} / **{parameter.name} cannot be described by a "
                "JSON Schema; declare each argument as a named parameter"
            )
        if annotation is inspect.Parameter.empty:
            annotation = Any
        field_name = f"p{index}"
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[field_name] = (
            Annotated[annotation, Field(alias=parameter.name, title=parameter.name)],
            default,
        )
        parameters.append(_Parameter(parameter.name, field_name, parameter.kind is parameter.POSITIONAL_ONLY))
    try:
        model = create_model(
            f"{spell_name}Arguments",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        schema = inline_refs(model.model_json_schema(by_alias=True))
    except (TypeError, ValueError, PydanticUserError) as exc:
        raise SpellDefinitionError(
            f"spell {spell_name!r}: its parameters' type hints cannot become a JSON Schema ({_first_line(exc)}); "
            "use JSON-like types, pydantic models or dataclasses"
        ) from None
    schema = _without_binary_format(schema)
    schema.pop("title", None)
    schema["additionalProperties"] = False
    schema.setdefault("properties", {})
    return ArgumentPlan(model, tuple(parameters), context_parameter, schema)


def plan_result(function: Callable[..., Any], spell_name: str) -> ResultPlan:
    """Build the return-value adapter and, for structured returns, the output schema."""
    hints = _type_hints(function)
    annotation = hints.get("return", inspect.Parameter.empty)
    if annotation is inspect.Parameter.empty or annotation is Any:
        return ResultPlan(None, None)
    if annotation is None or annotation is type(None):
        return ResultPlan(TypeAdapter(type(None)), None)
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        schema = _without_binary_format(inline_refs(adapter.json_schema(mode="serialization")))
    except (TypeError, ValueError, PydanticUserError) as exc:
        raise SpellDefinitionError(
            f"spell {spell_name!r}: its return type cannot become a JSON Schema ({_first_line(exc)}); "
            "return JSON-like values, pydantic models or dataclasses, or drop the annotation"
        ) from None
    if schema.get("type") != "object":
        return ResultPlan(adapter, None)
    return ResultPlan(adapter, schema)


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace local ``$ref``s by their definitions (recursive ones stay, with their ``$defs``).

    Some MCP clients handle ``$ref`` poorly; an inlined schema means the same to all of them.
    """
    definitions: dict[str, Any] = schema.get("$defs", {})
    kept_refs = False

    def resolve(node: Any, seen: frozenset[str]) -> Any:
        nonlocal kept_refs
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS_PREFIX):
            name = ref[len(_DEFS_PREFIX) :]
            if name in seen or name not in definitions:
                kept_refs = True
                return dict(node)
            target = resolve(definitions[name], seen | {name})
            extra = {key: resolve(value, seen) for key, value in node.items() if key != "$ref"}
            return {**target, **extra}
        return {key: resolve(value, seen) for key, value in node.items() if key != "$defs"}

    result: dict[str, Any] = resolve(schema, frozenset())
    if kept_refs:
        result["$defs"] = definitions
    return result


def _without_binary_format(node: Any) -> Any:
    """Drop pydantic's ``format: binary`` for ``bytes``: over JSON they are plain strings (UTF-8),
    and older TypeScript SDKs (1.13) fail to compile a schema that names that format."""
    if isinstance(node, list):
        return [_without_binary_format(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: _without_binary_format(value) for key, value in node.items() if not (key == "format" and value == "binary")
    }


def _is_context(annotation: Any) -> bool:
    """``SpellContext`` or ``SpellContext | None``."""
    if annotation is SpellContext:
        return True
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and arguments == [SpellContext]


def _signature(function: Callable[..., Any]) -> inspect.Signature:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise SpellDefinitionError(f"cannot read the signature of {function!r}: {exc}") from None


def _type_hints(function: Callable[..., Any]) -> dict[str, Any]:
    target: Any = function
    if not (inspect.isfunction(function) or inspect.ismethod(function)):
        target = getattr(function, "__call__", function)  # noqa: B004  # callable objects
    try:
        return typing.get_type_hints(target, include_extras=True)
    except (NameError, TypeError) as exc:
        raise SpellDefinitionError(
            f"cannot resolve the type hints of {getattr(function, '__qualname__', function)!r}: {exc}; "
            "import every type its annotations name at module level"
        ) from None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
