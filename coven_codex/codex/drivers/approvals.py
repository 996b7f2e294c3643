"""The app-server driver's approval desk: the server requests it relays as approvals, their answers.

Codex asks (a JSON-RPC server request about the thread): the desk relays it to the chat as
:class:`~coven_codex.codex.drivers.events.ApprovalRequested` under ``approval_policy = "ask"``
(declined after ``approval_timeout`` without an answer), or answers it by the policy. A request
Codex resolved itself (``serverRequest/resolved``) or whose turn ended is dropped. The turn's
clock does not run while a request waits (:class:`~coven_codex.codex.drivers.clock.TurnClock`).
Any other server request is refused with a JSON-RPC error so Codex does not wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from coven_codex.codex.appserver.connection import RpcId
from coven_codex.codex.driver_settings import DriverSettings
from coven_codex.codex.drivers.clock import TurnClock
from coven_codex.codex.drivers.events import ApprovalRequested, ApprovalResolved, DriverEvent, ResolvedBy
from coven_codex.codex.errors import DriverError, shorten

log = logging.getLogger(__name__)

APPROVAL_ACTIONS = {
    "item/commandExecution/requestApproval": "run a command",
    "item/fileChange/requestApproval": "change files",
    "execCommandApproval": "run a command",
    "applyPatchApproval": "apply a patch",
    "mcpServer/elicitation/request": "use a tool",
}
"""The server requests relayed as approvals, and what each asks to do (as the chat is told)."""


@dataclass(slots=True)
class _Approval:
    rpc_id: RpcId
    method: str
    timer: asyncio.Task[None] | None = None

    def drop(self) -> None:
        if self.timer is not None and self.timer is not asyncio.current_task():
            self.timer.cancel()


class ApprovalDesk:
    """The approval requests of one thread waiting for an answer (module docstring)."""

    def __init__(
        self,
        settings: DriverSettings,
        *,
        emit: Callable[[DriverEvent], None],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        respond: Callable[[RpcId, Mapping[str, JsonValue]], Awaitable[None]],
        refuse: Callable[[RpcId, str], Awaitable[None]],
        clock: Callable[[], TurnClock | None],
    ) -> None:
        self._settings = settings
        self._emit = emit
        self._spawn = spawn
        self._respond = respond
        self._refuse = refuse
        self._clock = clock
        self._waiting: dict[str, _Approval] = {}

    def asked(self, rpc_id: RpcId, method: str, params: Mapping[str, JsonValue]) -> None:
        """Codex asks ``method``: relay it to the chat, answer it by the policy, or refuse it."""
        action = APPROVAL_ACTIONS.get(method)
        if action is None:
            log.info("the app-server asked %s, which coven-codex does not handle; refusing", method)
            self._spawn(self._refuse_quietly(rpc_id, f"{method} is not supported by coven-codex"))
            return
        turn_id = params.get("turnId")
        request_id = f"{turn_id}:{rpc_id}" if isinstance(turn_id, str) else f"req-{uuid.uuid4().hex[:12]}"
        detail = _approval_detail(params)
        text = f"{action}: {detail}" if detail else action
        call_id = params.get("itemId") or params.get("callId")
        approval = _Approval(rpc_id, method)
        self._waiting[request_id] = approval
        clock = self._clock()
        if clock is not None:
            clock.approval_started()
        policy = self._settings.approval_policy
        if policy == "ask":
            self._emit(ApprovalRequested(request_id, text, call_id if isinstance(call_id, str) else None))
            approval.timer = self._spawn(self._timeout(request_id))
        else:
            self._spawn(self.resolve(request_id, policy == "approve", "policy"))

    async def answer(self, request_id: str, approve: bool, *, for_session: bool = False) -> None:
        """The chat's answer (``for_session``: for the rest of the session); :class:`DriverError` if the
        request is no longer waiting."""
        if request_id not in self._waiting:
            raise DriverError(f"no pending approval request {request_id!r} (answered, expired or unknown)")
        await self.resolve(request_id, approve, "chat", for_session=for_session)

    async def resolve(self, request_id: str, approve: bool, by: ResolvedBy, *, for_session: bool = False) -> None:
        """Answer ``request_id`` to Codex (once) and say so."""
        approval = self._waiting.pop(request_id, None)
        if approval is None:
            return
        approval.drop()
        clock = self._clock()
        if clock is not None:
            clock.approval_ended()
        await self._respond(
            approval.rpc_id, _approval_answer(approval.method, approve, for_session=approve and for_session)
        )
        self._emit(ApprovalResolved(request_id, approve, by))

    def resolved_by_codex(self, rpc_id: JsonValue) -> None:
        """Codex no longer waits for the request ``rpc_id`` (``serverRequest/resolved``)."""
        for request_id, approval in list(self._waiting.items()):
            if approval.rpc_id == rpc_id:
                self._waiting.pop(request_id)
                approval.drop()
                clock = self._clock()
                if clock is not None:
                    clock.approval_ended()

    def turn_ended(self, turn_id: str | None) -> None:
        """The turn ``turn_id`` ended: its requests go with it."""
        for request_id in [r for r in self._waiting if turn_id and r.startswith(f"{turn_id}:")]:
            self._waiting.pop(request_id).drop()

    def clear(self) -> None:
        """The thread failed: no request waits any more."""
        for approval in self._waiting.values():
            approval.drop()
        self._waiting.clear()

    async def _timeout(self, request_id: str) -> None:
        await asyncio.sleep(self._settings.approval_timeout)
        log.info("approval request %s unanswered after %.0fs; declining", request_id, self._settings.approval_timeout)
        with contextlib.suppress(DriverError):
            await self.resolve(request_id, False, "timeout")

    async def _refuse_quietly(self, rpc_id: RpcId, message: str) -> None:
        with contextlib.suppress(DriverError):
            await self._refuse(rpc_id, message)


def _approval_answer(method: str, approve: bool, *, for_session: bool = False) -> dict[str, JsonValue]:
    """The app-server's answer to an approval request: approved (``for_session``: for the rest of
    the session, ``acceptForSession``/``approved_for_session``), or declined. A tool's elicitation has
    no session-wide answer: it is accepted once."""
    if method in ("execCommandApproval", "applyPatchApproval"):
        return {"decision": ("approved_for_session" if for_session else "approved") if approve else "denied"}
    if method == "mcpServer/elicitation/request":
        return {"action": "accept", "content": {}} if approve else {"action": "decline"}
    return {"decision": ("acceptForSession" if for_session else "accept") if approve else "decline"}


def _approval_detail(params: Mapping[str, JsonValue]) -> str:
    detail = params.get("command") or params.get("message") or params.get("reason") or ""
    if isinstance(detail, list):
        detail = " ".join(str(part) for part in detail)
    return shorten(str(detail), 160)
