"""Running one spell call: validate, run (sync spells off the event loop), time out, convert.

A spell's failure never escapes as an exception: it becomes a
:class:`~coven_codex.mcp.messages.CallToolResult` with ``isError: true`` whose text says what
happened (the spell's own exception message may be shown; tracebacks and daemon internals go
to the log only). That holds for every ``BaseException``: ``sys.exit()``, ``KeyboardInterrupt``
or a ``CancelledError`` the spell raises itself fail the call, never the daemon; only a real
cancellation of the call (the client's, or the server's shutdown) propagates.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Mapping
from concurrent.futures import Executor, Future
from typing import Any

from pydantic import JsonValue

from coven_codex.mcp.context import SpellContext
from coven_codex.mcp.messages import CallToolResult, error_result
from coven_codex.mcp.registry import Spell
from coven_codex.mcp.schema import ArgumentError, ResultError
from coven_codex.mcp.threads import SpellThreads, SpellThreadsExhausted

log = logging.getLogger(__name__)

MAX_ERROR_TEXT = 2000


class SpellError(Exception):
    """Raise from a spell to fail with exactly this message (no exception type shown)."""


async def call_spell(
    spell: Spell,
    arguments: Mapping[str, JsonValue] | None,
    context: SpellContext,
    executor: Executor | None = None,
) -> CallToolResult:
    """Run ``spell`` with ``arguments``; always returns a result (or is cancelled)."""
    try:
        args, kwargs = spell.arguments.bind(arguments)
    except ArgumentError as exc:
        return error_result(f"invalid arguments for {spell.noun} {spell.name!r}: {exc}")
    if spell.arguments.context_parameter is not None:
        kwargs[spell.arguments.context_parameter] = context
    deadline = asyncio.timeout(spell.timeout)
    running: list[Future[Any]] = []  # the worker thread's work, for a sync spell on SpellThreads
    try:
        async with deadline:
            value = await _run(spell, args, kwargs, executor, running)
    except TimeoutError as exc:
        if not deadline.expired():  # the spell's own TimeoutError, not our deadline
            log.exception("spell %s raised", spell.name)
            return error_result(_clip(f"{spell.noun} {spell.name!r} failed: {type(exc).__name__}: {exc}"))
        context.mark_cancelled()
        _abandon(executor, running, spell)
        log.warning("%s %s timed out after %gs", spell.noun, spell.name, spell.timeout)
        return error_result(f"{spell.noun} {spell.name!r} timed out after {spell.timeout:g} seconds")
    except asyncio.CancelledError as exc:
        if _cancelling():
            context.mark_cancelled()
            _abandon(executor, running, spell)
            raise
        return _base_exception_result(spell, exc)
    except SpellThreadsExhausted as exc:  # logged once by the pool, not once per call
        return error_result(f"{spell.noun} {spell.name!r} cannot run now: {exc}")
    except SpellError as exc:
        log.info("spell %s refused: %s", spell.name, exc)
        return error_result(_clip(str(exc)))
    except Exception as exc:
        log.exception("spell %s raised", spell.name)
        return error_result(_clip(f"{spell.noun} {spell.name!r} failed: {type(exc).__name__}: {exc}"))
    except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit...: the spell's, not ours
        return _base_exception_result(spell, exc)
    try:
        content, structured = spell.result.to_content(value)
        return CallToolResult(content=content, structuredContent=structured)
    except ResultError as exc:
        log.error("spell %s returned a value not matching its return type: %s", spell.name, exc)
        return error_result(
            f"{spell.noun} {spell.name!r} returned a value that does not match its declared return type"
        )
    except Exception:
        log.exception("spell %s returned a value that cannot be serialised", spell.name)
        return error_result(f"{spell.noun} {spell.name!r} returned a value that cannot be turned into JSON")


async def _run(
    spell: Spell, args: list[Any], kwargs: dict[str, Any], executor: Executor | None, running: list[Future[Any]]
) -> Any:
    if spell.is_async:
        return await spell.function(*args, **kwargs)
    call = functools.partial(spell.function, *args, **kwargs)
    if isinstance(executor, SpellThreads):
        work = executor.submit(contextvars.copy_context().run, call)
        running.append(work)
        value = await asyncio.wrap_future(work)
    else:
        value = await asyncio.get_running_loop().run_in_executor(executor, contextvars.copy_context().run, call)
    if asyncio.iscoroutine(value):  # a sync wrapper around a coroutine function
        return await value
    return value


def _abandon(executor: Executor | None, running: list[Future[Any]], spell: Spell) -> None:
    """Give a sync spell's thread up to it, so that it does not hold a place in the pool."""
    if isinstance(executor, SpellThreads):
        for work in running:
            executor.abandon(work, spell.name)


def _cancelling() -> bool:
    """True when this task itself is being cancelled (not when a spell raised CancelledError)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _base_exception_result(spell: Spell, exc: BaseException) -> CallToolResult:
    log.error(
        "spell %s raised %s, which would end the daemon; it fails the call instead",
        spell.name,
        type(exc).__name__,
        exc_info=exc,
    )
    return error_result(
        f"{spell.noun} {spell.name!r} failed: it raised {type(exc).__name__} (a spell cannot exit or "
        "interrupt the daemon; raise an ordinary exception or SpellError to fail a call)"
    )


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "…"
