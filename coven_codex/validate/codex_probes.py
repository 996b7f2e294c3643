"""Probes of the Codex side: the executable, its version and driver, login, credentials, config.

Nothing here writes to the user's own Codex directory: the login check runs Codex against a
scratch copy of the user's ``auth.json`` (Codex may write helper files into its home), and the
config merge is performed in a scratch CODEX_HOME; both are removed before the probe returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coven_codex.codex.agents_md import TemplateError
from coven_codex.codex.capabilities import CapabilityError, detect_capabilities, plan_driver
from coven_codex.codex.config_merge import ConfigMergeError, KeyPath
from coven_codex.codex.discovery import DiscoveryError, find_codex
from coven_codex.codex.home import (
    API_KEY_VARIABLES,
    AUTH_FILE,
    CodexHomeError,
    DriverKind,
    prepare_codex_home,
    provider_env_keys,
    user_codex_dir,
)
from coven_codex.codex.launch import CodexLaunch, relative_path_entries, resolve_launch
from coven_codex.codex.process import run_captured
from coven_codex.codex.version import VersionError, detect_version
from coven_codex.mcp import SpellRegistry, codex_mcp_entry
from coven_codex.mcp.codex_entry import SERVER_NAME
from coven_codex.traces.otel_config import export_notice, exported_signals
from coven_codex.validate.framework import ProbeContext, ProbeResult
from coven_codex.validate.spell_probes import SPELLS_FACT

LOGIN_TIMEOUT = 10.0
CODEX_FACT = "codex_executable"
LAUNCH_FACT = "codex_launch"
VERSION_FACT = "codex_version"
DRIVER_FACT = "driver"
PROVIDER_KEYS_FACT = "provider_env_keys"


async def probe_codex_found(context: ProbeContext) -> ProbeResult:
    """Find the Codex executable and how it is started; warns about relative ``PATH`` entries."""
    settings = context.settings
    try:
        found = await asyncio.to_thread(find_codex, settings.codex_path, settings.workspace)
        launch = await asyncio.to_thread(resolve_launch, found, os.environ)
    except DiscoveryError as exc:
        return ProbeResult.fail(str(exc), _discovery_fix(str(exc)))
    context.facts[CODEX_FACT] = found
    context.facts[LAUNCH_FACT] = launch
    detail = f"{found.path} (via {found.source}); started as the {launch.describe()}"
    if relative := relative_path_entries(os.environ):
        shown = ", ".join(repr(entry) for entry in relative[:5])
        return ProbeResult.warn(
            f"{detail}; PATH has relative or empty entries ({shown}), left out of Codex's PATH",
            "Remove relative and empty entries (a leading or trailing ':', '::', '.') from PATH.",
        )
    return ProbeResult.ok(detail)


def _discovery_fix(message: str) -> str:
    if "relative or empty PATH entries" in message:
        return "Remove relative and empty entries from PATH; name folders in PATH by absolute path."
    if "native binary was not found" in message:
        return "Reinstall Codex (npm install -g @openai/codex) so its native binary is present, or install Node.js."
    if "inside the workspace" in message:
        return "Install Codex outside the workspace (npm install -g @openai/codex) and set codex_path to it."
    if "plain executable name" in message:
        return "Set codex_path to a bare name like `codex` or to an absolute path."
    return "Install it: npm install -g @openai/codex (or set codex_path / --codex-path to its absolute path)."


async def probe_codex_version(context: ProbeContext) -> ProbeResult:
    """Ask Codex for its version (``codex --version``)."""
    launch: CodexLaunch = context.facts[LAUNCH_FACT]
    try:
        version = await asyncio.to_thread(
            detect_version, launch.program, env=launch.environment(os.environ), command=launch.command
        )
    except VersionError as exc:
        return ProbeResult.fail(str(exc), "Reinstall the Codex CLI (npm install -g @openai/codex).")
    context.facts[VERSION_FACT] = version
    return ProbeResult.ok(version.raw or str(version))


async def probe_codex_supported(context: ProbeContext) -> ProbeResult:
    """The version is supported and offers the driver asked for; records the driver that will run
    (chosen by what the binary's app-server protocol offers: :mod:`coven_codex.codex.capabilities`)."""
    version = context.facts[VERSION_FACT]
    if not version.supported:
        return ProbeResult.fail(
            f"Codex {version} is older than the oldest supported version 0.47.0",
            "Upgrade: npm install -g @openai/codex@latest",
        )
    launch: CodexLaunch = context.facts[LAUNCH_FACT]
    settings = context.settings
    try:
        capabilities = await asyncio.to_thread(
            detect_capabilities,
            launch.program,
            launch.command,
            version,
            env=launch.environment(os.environ),
            cache_dir=settings.resolved_state_dir,
        )
        plan = plan_driver(capabilities, settings.driver)
    except CapabilityError as exc:
        return ProbeResult.fail(
            str(exc), 'Set driver = "auto" (or "exec"), or upgrade Codex (npm install -g @openai/codex@latest).'
        )
    except OSError as exc:
        return ProbeResult.fail(
            f"cannot read the Codex binary {launch.program} ({exc.strerror})", "Reinstall the Codex CLI."
        )
    context.facts[DRIVER_FACT] = plan.driver
    return ProbeResult.ok(f"Codex {version} is supported; driver {plan.reason}")


async def probe_traces(context: ProbeContext) -> ProbeResult:
    """What ``collect_traces`` will capture from this Codex version (docs/exec.md, Traces)."""
    version = context.facts[VERSION_FACT]
    if not context.settings.collect_traces:
        return ProbeResult.ok("trace capture is off (collect_traces = false)")
    notice = export_notice(version)
    if notice is not None:
        return ProbeResult.warn(notice, "Upgrade Codex (npm install -g @openai/codex@latest) to capture more.")
    return ProbeResult.ok(f"Codex {version} exports {' and '.join(exported_signals(version))} to the local receiver")


def _configured_env_keys(context: ProbeContext) -> list[str]:
    """env_key variables the user's base config (file or [codex] table) names for its providers."""
    keys = provider_env_keys(context.settings.codex)
    base = context.settings.codex_config
    if base is not None:
        # an unreadable base config is reported by the config probe, with its own fix
        with contextlib.suppress(OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            keys += provider_env_keys(tomllib.loads(base.expanduser().read_text(encoding="utf-8")))
    return keys


def _credential_sources(context: ProbeContext) -> list[str]:
    sources = []
    user_dir = user_codex_dir(os.environ)
    if user_dir is not None and (user_dir / AUTH_FILE).is_file():
        sources.append(f"{user_dir / AUTH_FILE}")
    isolated = context.settings.resolved_codex_home / AUTH_FILE
    if isolated.is_file():
        sources.append(str(isolated))
    sources += [f"${name}" for name in API_KEY_VARIABLES[:3] if os.environ.get(name)]
    sources += [f"${name} (model provider env_key)" for name in _configured_env_keys(context) if os.environ.get(name)]
    return sources


async def probe_credentials(context: ProbeContext) -> ProbeResult:
    """Codex has credentials: an ``auth.json``, an API-key variable, or the provider's env key."""
    sources = _credential_sources(context)
    if sources:
        return ProbeResult.ok("credentials: " + ", ".join(sources))
    missing_keys = [name for name in _configured_env_keys(context) if not os.environ.get(name)]
    if missing_keys:
        return ProbeResult.fail(
            f"the model provider needs ${missing_keys[0]}, which is not set",
            f"export {missing_keys[0]}=... before starting coven-codex.",
        )
    return ProbeResult.fail(
        "no Codex credentials: no auth.json in your Codex directory and no OPENAI_API_KEY/CODEX_API_KEY",
        "Run `codex login` once (outside coven-codex), or export OPENAI_API_KEY.",
    )


async def probe_login(context: ProbeContext) -> ProbeResult:
    """What ``codex login status`` says, run against a scratch copy of the user's ``auth.json``."""
    launch: CodexLaunch = context.facts[LAUNCH_FACT]
    api_sources = [s for s in _credential_sources(context) if s.startswith("$")]
    user_dir = user_codex_dir(os.environ)
    scratch = Path(tempfile.mkdtemp(prefix="coven-validate-login-"))
    try:
        if user_dir is not None and (user_dir / AUTH_FILE).is_file():
            shutil.copy2(user_dir / AUTH_FILE, scratch / AUTH_FILE)
        env = launch.environment({**os.environ, "CODEX_HOME": str(scratch)})
        try:
            done = await asyncio.to_thread(run_captured, launch.argv("login", "status"), env=env, timeout=LOGIN_TIMEOUT)
        except Exception as exc:  # TimeoutExpired, OSError: both mean "could not tell"
            return ProbeResult.warn(
                f"`codex login status` gave no answer ({type(exc).__name__})",
                "Run `codex login status` by hand; if it hangs, check the network and Codex's install.",
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = (done.stdout + "\n" + done.stderr).splitlines()
    said = " ".join(" ".join(line for line in lines if not line.startswith("WARNING:")).split())[:160]
    if done.returncode == 0 and "not logged in" not in said.lower():
        return ProbeResult.ok(said or "logged in")
    if api_sources:
        return ProbeResult.ok(f"not logged in, but {', '.join(api_sources)} will be used")
    return ProbeResult.warn(
        f"Codex says: {said or 'not logged in'}",
        "Run `codex login` (or export OPENAI_API_KEY) unless a local model provider is used.",
    )


async def probe_config_merge(context: ProbeContext) -> ProbeResult:
    """Build the isolated Codex home in a scratch folder and check its merged config re-parses."""
    settings = context.settings
    driver: DriverKind = context.facts.get(DRIVER_FACT, "exec")
    registry = context.facts.get(SPELLS_FACT)
    owned: dict[KeyPath, Mapping[str, Any]] = {}
    if isinstance(registry, SpellRegistry) and len(registry) > 0:
        version = context.facts.get(VERSION_FACT)
        owned[("mcp_servers", SERVER_NAME)] = codex_mcp_entry(
            "/run/coven-validate/placeholder.sock",
            "x" * 32,
            str(version) if version else None,
            tool_timeout=registry.longest_timeout,
        )
    scratch = Path(tempfile.mkdtemp(prefix="coven-validate-config-"))
    try:
        home = await asyncio.to_thread(
            prepare_codex_home,
            scratch / "home",
            settings.workspace,
            driver=driver,
            base_config=settings.codex_config,
            inline_config=settings.codex,
            owned_tables=owned,
            agents_template=settings.agents_template,
            agents_vars=settings.agents_vars,
        )
        parsed = tomllib.loads(home.config_path.read_text(encoding="utf-8"))
    except (ConfigMergeError, CodexHomeError, TemplateError) as exc:
        return ProbeResult.fail(str(exc), _config_fix(settings.codex_config))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    context.facts[PROVIDER_KEYS_FACT] = home.missing_env_keys
    parts = [f"{len(parsed)} top-level key(s)"]
    if owned:
        parts.append("spell server entry")
    if home.agents_md is not None:
        parts.append("AGENTS.md rendered")
    if home.missing_env_keys:
        return ProbeResult.fail(
            f"merged config is valid, but its model provider needs ${home.missing_env_keys[0]}, which is not set",
            f"export {home.missing_env_keys[0]}=... before starting coven-codex.",
        )
    return ProbeResult.ok("merged config re-parses as intended (" + ", ".join(parts) + ")")


def _config_fix(base: Path | None) -> str:
    if base is None:
        return "Fix the [codex] table or agents_template in coven.toml."
    return f'Fix {base} (check it with `python -c \'import tomllib; tomllib.load(open("{base}", "rb"))\'`).'
