"""validate's checks of a journal on Redis: reachable, Redis 7.0 or newer, persistence on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from coven_codex.journal.opening import describe_journal, is_redis_name
from coven_codex.journal.protocol import JournalError
from coven_codex.journal.redis.names import parse_redis_name
from coven_codex.validate.framework import ProbeContext, ProbeResult, Status

MIN_VERSION: Final = (7, 0)
"""The Redis the backend needs (Lua scripts with XADD/XTRIM MINID, exclusive XRANGE)."""
_FACT: Final = "redis_persistence"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


async def probe_redis(context: ProbeContext) -> ProbeResult:
    """A Redis journal's server answers and is Redis 7.0 or newer (skipped for a file journal)."""
    journal = context.settings.journal
    if journal is None or not is_redis_name(journal):
        return ProbeResult(Status.SKIP, "the journal is not on Redis")
    try:
        location = parse_redis_name(str(journal))
    except JournalError as exc:
        return ProbeResult.fail(str(exc), "Write the journal as redis://HOST:PORT/DB?key=NAME.")
    try:
        from redis.asyncio import Redis  # noqa: PLC0415 (the optional [redis] extra)
        from redis.backoff import NoBackoff  # noqa: PLC0415
        from redis.exceptions import AuthenticationError, RedisError  # noqa: PLC0415
        from redis.retry import Retry  # noqa: PLC0415

        from coven_codex.journal.redis.journal import speaks_plain_redis  # noqa: PLC0415
        from coven_codex.journal.redis.outage import refused_credentials  # noqa: PLC0415
    except ImportError:
        return ProbeResult.fail("redis-py is not installed", "pip install 'coven-codex[redis]'")
    where = describe_journal(journal)
    parts = urlsplit(location.url)
    # asked first, in plain text: a plain server never answers a TLS handshake, which would be waited for in full
    if parts.scheme == "rediss" and parts.hostname and await speaks_plain_redis(parts.hostname, parts.port or 6379):
        return ProbeResult.fail(
            f"Redis at {where} speaks plain Redis, not TLS (it answered a plain-text PING): the journal's name"
            " says rediss://",
            "Write the journal as redis://... (or turn TLS on in Redis: tls-port).",
        )
    client = Redis.from_url(
        location.url, socket_connect_timeout=3, socket_timeout=3, retry=Retry(NoBackoff(), 0), decode_responses=True
    )
    try:
        server: Mapping[str, Any] = await client.info("server")
        persistence: Mapping[str, Any] = await client.info("persistence")
        try:
            config: dict[Any, Any] = {}
            for name in ("appendonly", "appendfsync", "save"):
                config.update(await client.config_get(name))
        except RedisError:  # CONFIG renamed or refused by an ACL: INFO persistence still tells AOF
            config = {}
        entries = await client.xlen(location.stream)
    except AuthenticationError as exc:
        refused = refused_credentials(where, exc, password_given=urlsplit(location.url).password is not None)
        return ProbeResult.fail(str(refused), "Put the right password in --journal.")
    except RedisError as exc:
        return ProbeResult.fail(
            f"cannot reach Redis at {where}: {str(exc)[:200] or type(exc).__name__}",
            "Start Redis (redis-server) or fix host, port, database and password in --journal.",
        )
    finally:
        await client.aclose()
    version = str(server.get("redis_version", "0"))
    if _version(version) < MIN_VERSION:
        return ProbeResult.fail(
            f"Redis {version} at {where} is older than 7.0",
            "Upgrade Redis to 7.0 or newer (Debian 12: apt install redis).",
        )
    context.facts[_FACT] = {**{k: str(v) for k, v in persistence.items()}, **{k: str(v) for k, v in config.items()}}
    return ProbeResult.ok(f"Redis {version} at {where} answers; the stream {location.stream!r} holds {entries} entries")


async def probe_redis_persistence(context: ProbeContext) -> ProbeResult:
    """The Redis of the journal keeps its data across a restart (append-only file, else snapshots)."""
    facts: dict[str, str] | None = context.facts.get(_FACT)
    if facts is None:
        return ProbeResult(Status.SKIP, "the journal is not on Redis")
    aof = facts.get("appendonly", "yes" if facts.get("aof_enabled") == "1" else "no") == "yes"
    snapshots = facts.get("save", "")
    fsync = facts.get("appendfsync", "")
    if aof:
        when = {"always": "every write", "everysec": "every second", "no": "when the OS flushes"}.get(fsync, fsync)
        detail = f"append-only file on (fsync {when})" if when else "append-only file on"
        if fsync == "no":
            return ProbeResult.warn(
                detail + ": a power cut can lose the last writes",
                "CONFIG SET appendfsync everysec (and in redis.conf).",
            )
        return ProbeResult.ok(detail)
    fix = "Turn the append-only file on: CONFIG SET appendonly yes, and appendonly yes in redis.conf."
    if snapshots.strip():
        return ProbeResult.warn(
            f"only snapshots (save {snapshots}): a Redis crash loses what was written since the last one", fix
        )
    return ProbeResult.warn("persistence is off: a Redis restart loses the whole journal and every cursor", fix)
