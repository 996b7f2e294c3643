"""Spell registration, schemas, validation, invocation and loading."""

from __future__ import annotations

import asyncio
import datetime
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from coven_codex.mcp import (
    Spell,
    SpellContext,
    SpellDefinitionError,
    SpellLoadError,
    SpellRegistry,
    load_spell_sources,
    load_spells,
)
from coven_codex.mcp.invoke import call_spell
from coven_codex.mcp.messages import wire


def _context(name: str = "t") -> SpellContext:
    return SpellContext(spell_name=name)


def _get(registry: SpellRegistry, name: str) -> Spell:
    found = registry.get(name)
    assert found is not None, f"no spell {name!r}"
    return found


@pytest.mark.parametrize("name", ["a", "A.b-c_9", "x" * 128])
def test_valid_names(name: str) -> None:
    registry = SpellRegistry()
    registry.register(lambda: None, name=name)
    assert name in registry


@pytest.mark.parametrize("name", ["", "x" * 129, "has space", "slash/name", "ünï", "comma,"])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(SpellDefinitionError, match="not a valid MCP tool name"):
        SpellRegistry().register(lambda: None, name=name)


def test_duplicates_are_refused() -> None:
    registry = SpellRegistry()

    @registry.spell
    def twice() -> None:
        """One."""

    with pytest.raises(SpellDefinitionError, match="two spells are named 'twice'"):
        registry.register(lambda: None, name="twice")


class Options(BaseModel):
    depth: int = Field(3, ge=1, description="how deep")
    tags: list[str] = []


def test_input_schema_from_type_hints() -> None:
    registry = SpellRegistry()

    @registry.spell(title="Search")
    def search(
        query: Annotated[str, Field(min_length=2, description="what to look for")],
        options: Options,
        limit: int = 10,
        ctx: SpellContext | None = None,
    ) -> list[str]:
        """Search the things.

        Longer explanation.
        """
        return []

    definition = registry.tool_definitions()[0]
    assert definition["name"] == "search"
    assert definition["title"] == "Search"
    assert definition["description"] == "Search the things.\n\nLonger explanation."
    schema = definition["inputSchema"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["query", "options"]
    assert schema["properties"]["query"] == {
        "type": "string",
        "minLength": 2,
        "description": "what to look for",
        "title": "query",
    }
    assert schema["properties"]["limit"]["default"] == 10
    options = schema["properties"]["options"]
    assert "$ref" not in str(schema)
    assert options["properties"]["depth"]["minimum"] == 1
    assert "ctx" not in schema["properties"]
    assert "outputSchema" not in definition


def test_context_parameter_is_hidden_and_injected() -> None:
    registry = SpellRegistry()

    @registry.spell
    def who(ctx: SpellContext) -> str:
        return ctx.spell_name

    assert registry.tool_definitions()[0]["inputSchema"]["properties"] == {}
    result = wire(asyncio.run(call_spell(_get(registry, "who"), {}, _context("who"))))
    assert result["content"] == [{"type": "text", "text": "who"}]


def test_output_schema_only_for_structured_returns() -> None:
    registry = SpellRegistry()

    def model() -> Options:
        return Options()

    def mapping() -> dict[str, int]:
        return {}

    def text() -> str:
        return ""

    def untyped():  # type: ignore[no-untyped-def]  # deliberately unannotated
        return 1

    for function in (model, mapping, text, untyped):
        registry.register(function)
    schemas = {d["name"]: d.get("outputSchema") for d in registry.tool_definitions()}
    assert (schemas["model"] or {})["type"] == "object"
    assert schemas["mapping"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert schemas["text"] is None and schemas["untyped"] is None


def test_unusable_signatures_are_refused() -> None:
    def star(*args: int) -> None: ...

    def unknown(x: threading.Lock) -> None: ...

    with pytest.raises(SpellDefinitionError, match=r"\*args"):
        SpellRegistry().register(star)
    with pytest.raises(SpellDefinitionError, match="cannot become a JSON Schema"):
        SpellRegistry().register(unknown)
    with pytest.raises(SpellDefinitionError, match="timeout"):
        SpellRegistry().register(lambda: None, name="t", timeout=0)


def test_sync_spells_run_off_the_event_loop_thread() -> None:
    registry = SpellRegistry()

    @registry.spell
    def where() -> str:
        return threading.current_thread().name

    result = wire(asyncio.run(call_spell(_get(registry, "where"), None, _context())))
    assert result["content"][0]["text"] != threading.main_thread().name


def test_arguments_are_validated_before_the_call() -> None:
    calls: list[Any] = []
    registry = SpellRegistry()

    @registry.spell
    def record(count: Annotated[int, Field(ge=0)], options: Options) -> int:
        calls.append((count, options))
        return count

    spell_ = registry.get("record")
    assert spell_ is not None
    bad = wire(asyncio.run(call_spell(spell_, {"count": -1, "options": {"depth": 0}}, _context())))
    assert bad["isError"] is True
    text = bad["content"][0]["text"]
    assert "count: Input should be greater than or equal to 0" in text
    assert "options.depth: Input should be greater than or equal to 1" in text
    assert calls == []
    good = wire(asyncio.run(call_spell(spell_, {"count": 2, "options": {"tags": ["a"]}}, _context())))
    assert good == {"content": [{"type": "text", "text": "2"}], "isError": False}
    assert isinstance(calls[0][1], Options)


def test_wrong_return_value_is_an_error_without_internals() -> None:
    registry = SpellRegistry()

    @registry.spell
    def liar() -> int:
        return "not a number"  # type: ignore[return-value]  # the point of the test

    result = wire(asyncio.run(call_spell(_get(registry, "liar"), {}, _context())))
    assert result == {
        "content": [
            {"type": "text", "text": "spell 'liar' returned a value that does not match its declared return type"}
        ],
        "isError": True,
    }


def test_parameters_named_like_model_attributes_work() -> None:
    registry = SpellRegistry()

    @registry.spell
    def odd(json: str, copy: int, model_config: bool = False, /) -> str:
        return f"{json}-{copy}-{model_config}"

    result = wire(asyncio.run(call_spell(_get(registry, "odd"), {"json": "j", "copy": 2}, _context())))
    assert result["content"][0]["text"] == "j-2-False"


def _write_module(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    sys.modules.pop(name, None)


def test_load_spells_accepts_function_list_and_registry(tmp_path: Path) -> None:
    _write_module(
        tmp_path,
        "spellmod_a",
        """
        from coven_codex.mcp import SpellRegistry, spell
        reg = SpellRegistry()
        @reg.spell
        def one() -> int:
            return 1
        @spell(name="two.renamed", timeout=5)
        def two() -> int:
            return 2
        def three() -> int:
            return 3
        listed = [two, three]
        class Holder:
            registry = reg
    """,
    )
    assert [s.name for s in load_spells("spellmod_a:reg", search_paths=[tmp_path])] == ["one"]
    assert [s.name for s in load_spells("spellmod_a:three", search_paths=[tmp_path])] == ["three"]
    loaded = load_spells("spellmod_a:listed", search_paths=[tmp_path])
    assert [s.name for s in loaded] == ["two.renamed", "three"]
    assert _get(loaded, "two.renamed").timeout == 5
    assert [s.name for s in load_spells("spellmod_a:Holder.registry", search_paths=[tmp_path])] == ["one"]
    combined = load_spell_sources(["spellmod_a:reg", "spellmod_a:listed"], search_paths=[tmp_path])
    assert len(combined) == 3
    with pytest.raises(SpellLoadError, match="two spells are named 'one'"):
        load_spell_sources(["spellmod_a:reg", "spellmod_a:reg"], search_paths=[tmp_path])


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("no_colon", "not of the form module:object"),
        ("definitely_missing_module_x:f", "no module named 'definitely_missing_module_x'"),
        ("spellmod_b:missing", "has no attribute 'missing'"),
        ("spellmod_b:value", "is not a function"),
        ("spellmod_broken:f", "raised ZeroDivisionError"),
    ],
)
def test_load_errors_say_what_to_fix(tmp_path: Path, source: str, message: str) -> None:
    _write_module(tmp_path, "spellmod_b", "value = 3\n")
    _write_module(tmp_path, "spellmod_broken", "x = 1 / 0\n")
    with pytest.raises(SpellLoadError, match=message):
        load_spells(source, search_paths=[tmp_path])


def test_example_spells_load() -> None:
    root = Path(__file__).resolve().parents[2]
    registry = load_spells("examples.spells_example:spells", search_paths=[root])
    assert {"add", "summarize", "countdown", "divide"} <= {s.name for s in registry}


def test_spell_threads_run_concurrently_and_never_block_exit() -> None:
    from coven_codex.mcp.threads import SpellThreads

    threads = SpellThreads(3)
    release = threading.Event()
    started = threading.Barrier(4)

    def wait_for_release() -> str:
        started.wait(timeout=10)
        release.wait(timeout=10)
        return threading.current_thread().name

    futures = [threads.submit(wait_for_release) for _ in range(3)]
    started.wait(timeout=10)  # all three run at once
    release.set()
    names = {future.result(timeout=10) for future in futures}
    assert len(names) == 3
    assert all(thread.daemon for thread in threading.enumerate() if thread.name in names)
    assert [threads.submit(lambda i=i: i * 2).result(timeout=10) for i in range(5)] == [0, 2, 4, 6, 8]
    blocked = threads.submit(release.clear)
    blocked.result(timeout=10)
    threads.shutdown(cancel_futures=True)
    with pytest.raises(RuntimeError, match="shut down"):
        threads.submit(lambda: None)


def test_a_spells_own_timeout_error_is_not_reported_as_the_deadline() -> None:
    registry = SpellRegistry()

    @registry.spell
    async def flaky() -> str:
        raise TimeoutError("upstream took too long")

    result = wire(asyncio.run(call_spell(_get(registry, "flaky"), {}, _context())))
    assert result["content"][0]["text"] == "spell 'flaky' failed: TimeoutError: upstream took too long"


def test_context_reads_codex_thread_and_turn_ids() -> None:
    meta = {"threadId": "t-1", "x-codex-turn-metadata": {"thread_id": "t-1", "turn_id": "u-2"}, "progressToken": 1}
    context = SpellContext(spell_name="s", meta=meta)
    assert (context.thread_id, context.turn_id) == ("t-1", "u-2")
    assert (SpellContext(spell_name="s").thread_id, SpellContext(spell_name="s").turn_id) == (None, None)


def test_arguments_are_validated_as_strictly_as_the_schema() -> None:
    registry = SpellRegistry()

    @registry.spell
    def add(a: int, b: int) -> int:
        return a + b

    @registry.spell
    def divide(a: float, b: float) -> float:
        return a / b

    @registry.spell
    def stamp(when: datetime.date, ident: uuid.UUID, tags: tuple[str, ...]) -> str:
        return f"{when.isoformat()} {ident} {','.join(tags)}"

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return wire(asyncio.run(call_spell(_get(registry, name), arguments, _context())))

    for name, arguments in (
        ("add", {"a": "2", "b": 3}),
        ("add", {"a": 2, "b": True}),
        ("add", {"a": 2.5, "b": 1}),
        ("divide", {"a": "1e3", "b": "4"}),
        ("divide", {"a": 1.0, "b": False}),
    ):
        result = call(name, arguments)
        assert result["isError"] is True, (name, arguments, result)
        assert result["content"][0]["text"].startswith(f"invalid arguments for spell {name!r}")
    assert call("add", {"a": 2, "b": 3})["content"][0]["text"] == "5"
    assert call("divide", {"a": 1, "b": 4})["content"][0]["text"] == "0.25"  # an integer is a number
    ident = "12345678-1234-5678-1234-567812345678"
    stamped = call("stamp", {"when": "2026-11-23", "ident": ident, "tags": ["x", "y"]})
    assert stamped["content"][0]["text"] == f"2026-11-23 {ident} x,y"


def test_bytes_parameters_publish_a_plain_string_schema() -> None:
    registry = SpellRegistry()

    @registry.spell
    def size(blob: bytes, more: list[bytes] | None = None) -> int:
        return len(blob) + sum(len(item) for item in more or [])

    schema = _get(registry, "size").tool_definition()["inputSchema"]
    assert "binary" not in str(schema)
    assert schema["properties"]["blob"] == {"type": "string", "title": "blob"}
    result = wire(asyncio.run(call_spell(_get(registry, "size"), {"blob": "héllo", "more": ["ab"]}, _context())))
    assert result["content"][0]["text"] == "8"


def test_spell_outcomes_are_bounded_and_keyed_by_name_arguments_and_text() -> None:
    from coven_codex.entries import ToolCallEntry, ToolResultEntry
    from coven_codex.mcp.messages import CallToolResult, error_result
    from coven_codex.mcp.outcomes import SpellCalls, SpellOutcomes

    outcomes = SpellOutcomes(limit=2)
    failure = error_result("boom")
    outcomes.record("add", {"b": 2, "a": 1}, failure)
    assert outcomes.failed("add", {"a": 1, "b": 2}, "boom") is True  # key order does not matter
    assert outcomes.failed("add", {"a": 1, "b": 3}, "boom") is None
    assert outcomes.failed("sub", {"a": 1, "b": 2}, "boom") is None
    outcomes.record("add", {"a": 5}, CallToolResult(content=[{"type": "text", "text": "6"}]))
    outcomes.record("add", {"a": 6}, CallToolResult(content=[{"type": "text", "text": "7"}]))
    assert len(outcomes) == 2 and outcomes.failed("add", {"a": 1, "b": 2}, "boom") is None  # the oldest went

    outcomes.record("boom", {}, failure)
    calls = SpellCalls(outcomes)
    call = ToolCallEntry(conversation="c", tool="coven.boom", arguments={}, call_id="x")
    assert calls.correct(call) is call
    result = ToolResultEntry(conversation="c", call_id="x", tool="coven.boom", text="boom")
    corrected = calls.correct(result)
    assert isinstance(corrected, ToolResultEntry) and corrected.is_error is True
    other = ToolResultEntry(conversation="c", call_id="y", tool="shell", text="boom")
    assert calls.correct(other) is other
