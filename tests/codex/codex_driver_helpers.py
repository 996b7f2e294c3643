"""Helpers for driver tests: a prepared CODEX_HOME against the scripted model server, and an
event recorder that tests can wait on (imported by the test modules; the fixture is in
``conftest.py``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from coven_codex.codex.appserver import AppServerPool
from coven_codex.codex.capabilities import CodexCapabilities, DriverPlan, detect_capabilities, plan_driver
from coven_codex.codex.drivers import CodexDriver, DriverChoice, DriverEvent, DriverSettings, create_driver
from coven_codex.codex.home import CodexHome, prepare_codex_home
from coven_codex.codex.thought import Thought
from coven_codex.codex.version import CodexVersion, parse_version
from coven_codex.journal import START
from coven_codex.testing import ScriptedModelServer, codex_config
from coven_codex.testing.codex_config import DEFAULT_ENV_KEY

E = TypeVar("E")


def thought(text: str, thought_id: str) -> Thought:
    """A thought as a conversation hands it to a driver (the journal position is the driver's no concern)."""
    return Thought(thought_id, text, START)


_CAPABILITIES: dict[Path, CodexCapabilities] = {}


def pinned_cli(version: str) -> Path:
    """The Codex CLI ``version`` as scripts/install-codex.sh installs it."""
    return Path(__file__).resolve().parents[2] / ".codex-cli" / version / "node_modules" / ".bin" / "codex"


def driver_plan(executable: Path, version: CodexVersion, choice: DriverChoice = "auto") -> DriverPlan:
    """The plan the daemon would make for ``executable`` (its capabilities probed once per test run)."""
    if executable not in _CAPABILITIES:
        _CAPABILITIES[executable] = detect_capabilities(
            executable, (str(executable),), version, env=os.environ, cache_dir=None
        )
    return plan_driver(_CAPABILITIES[executable], choice)


class Recorder:
    """An event sink that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[DriverEvent] = []
        self._changed = asyncio.Condition()

    async def __call__(self, event: DriverEvent) -> None:
        async with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait_for(
        self, kind: type[E], predicate: Callable[[E], bool] = lambda _e: True, *, count: int = 1, timeout: float = 60.0
    ) -> list[E]:
        async def matched() -> list[E]:
            async with self._changed:
                while True:
                    found: list[E] = [e for e in self.events if isinstance(e, kind) and predicate(e)]
                    if len(found) >= count:
                        return found
                    await self._changed.wait()

        try:
            return await asyncio.wait_for(matched(), timeout)
        except TimeoutError:
            raise AssertionError(f"no {count}x {kind.__name__} within {timeout}s; events: {self.events}") from None


@dataclass
class CodexSetup:
    """A workspace, an isolated CODEX_HOME pointing at ``server``, and a way to make drivers."""

    executable: Path
    version: str
    workspace: Path
    home: CodexHome
    server: ScriptedModelServer

    def driver(
        self, recorder: Recorder, *, choice: DriverChoice = "auto", pool: AppServerPool | None = None, **settings: Any
    ) -> CodexDriver:
        version = parse_version(f"codex-cli {self.version}")
        return create_driver(
            self.executable,
            version,
            self.workspace,
            env=self.home.env,
            settings=DriverSettings(**{"kill_grace": 3.0, **settings}),
            sink=recorder,
            # (a test of a missing executable gets the plan of the real CLI of its version)
            plan=driver_plan(
                self.executable if self.executable.exists() else pinned_cli(self.version), version, choice
            ),
            pool=pool,
        )

    def pool(self, **options: Any) -> AppServerPool:
        """A pool of shared app-servers for this CODEX_HOME."""
        return AppServerPool(
            (str(self.executable),),
            env=self.home.env,
            cwd=self.workspace,
            settings=DriverSettings(kill_grace=3.0),
            **options,
        )

    def rollouts(self) -> list[Path]:
        return sorted((self.home.path / "sessions").rglob("rollout-*.jsonl"))


def make_setup(
    tmp_path: Path,
    executable: Path,
    version: str,
    server: ScriptedModelServer,
    *,
    driver: str,
    extra: dict[str, Any] | None = None,
) -> CodexSetup:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    user_home = tmp_path / "user-home"
    user_home.mkdir(exist_ok=True)
    config = codex_config(server.base_url, extra=extra)
    config.pop("approval_policy")  # let coven's per-driver default apply unless `extra` sets one
    if extra and "approval_policy" in extra:
        config["approval_policy"] = extra["approval_policy"]
    home = prepare_codex_home(
        workspace / ".codex",
        workspace,
        driver="app-server" if driver == "app-server" else "exec",
        inline_config=config,
        environ={
            "HOME": str(user_home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            DEFAULT_ENV_KEY: "scripted-test-key",
        },
    )
    return CodexSetup(executable, version, workspace, home, server)


def texts(items: Iterable[Any]) -> list[str]:
    return [getattr(item, "text", "") for item in items]
