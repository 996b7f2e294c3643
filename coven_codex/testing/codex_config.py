"""Write a Codex ``config.toml`` that points Codex at a local (scripted) model server.

::

    env = write_codex_config(codex_home, server.base_url,
                             mcp_servers={"echo": {"command": sys.executable, "args": [path]}})
    subprocess.run([codex, "exec", "--json", "--skip-git-repo-check", "hi"],
                   env={**os.environ, **env}, cwd=workspace)

The config selects ``model = "m"`` from ``[model_providers.local]`` (``wire_api =
"responses"``), turns off retries (so error tests are quick), the update check, analytics
and feedback, and sets ``approval_policy = "never"``. Keys one version does not know are
ignored by it (verified on 0.169.0 and 0.47.0). The returned dict holds the environment
Codex needs: ``CODEX_HOME`` and the provider's key variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit

DEFAULT_ENV_KEY = "COVEN_SCRIPTED_MODEL_KEY"
DEFAULT_MODEL = "m"
PROVIDER_ID = "local"


def codex_config(
    base_url: str,
    *,
    model: str = DEFAULT_MODEL,
    env_key: str = DEFAULT_ENV_KEY,
    request_max_retries: int = 0,
    stream_max_retries: int = 0,
    stream_idle_timeout_ms: int = 30_000,
    mcp_servers: Mapping[str, Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The config as a dict (``extra`` is merged in last, tables recursively)."""
    config: dict[str, Any] = {
        "model": model,
        "model_provider": PROVIDER_ID,
        "approval_policy": "never",
        "check_for_update_on_startup": False,
        "suppress_unstable_features_warning": True,
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "model_providers": {
            PROVIDER_ID: {
                "name": "coven scripted model",
                "base_url": base_url,
                "wire_api": "responses",
                "env_key": env_key,
                "request_max_retries": request_max_retries,
                "stream_max_retries": stream_max_retries,
                "stream_idle_timeout_ms": stream_idle_timeout_ms,
            }
        },
    }
    if mcp_servers:
        config["mcp_servers"] = {name: dict(table) for name, table in mcp_servers.items()}
    if extra:
        _merge(config, extra)
    return config


def _merge(target: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = dict(value) if isinstance(value, Mapping) else value


def write_codex_config(
    codex_home: Path,
    base_url: str,
    *,
    model: str = DEFAULT_MODEL,
    env_key: str = DEFAULT_ENV_KEY,
    api_key: str = "scripted-test-key",
    request_max_retries: int = 0,
    stream_max_retries: int = 0,
    stream_idle_timeout_ms: int = 30_000,
    mcp_servers: Mapping[str, Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Create ``codex_home`` if needed, (over)write its ``config.toml``, return the env vars."""
    codex_home.mkdir(parents=True, exist_ok=True)
    config = codex_config(
        base_url,
        model=model,
        env_key=env_key,
        request_max_retries=request_max_retries,
        stream_max_retries=stream_max_retries,
        stream_idle_timeout_ms=stream_idle_timeout_ms,
        mcp_servers=mcp_servers,
        extra=extra,
    )
    (codex_home / "config.toml").write_text(tomlkit.dumps(config), encoding="utf-8")
    return codex_env(codex_home, env_key=env_key, api_key=api_key)


def codex_env(
    codex_home: Path, *, env_key: str = DEFAULT_ENV_KEY, api_key: str = "scripted-test-key"
) -> dict[str, str]:
    """The variables Codex needs to run against the config written by :func:`write_codex_config`."""
    return {"CODEX_HOME": str(codex_home), env_key: api_key}
