"""The Lua scripts of the cluster: every check-and-write on a lease is one atomic script in Redis.

Keys of a conversation (see :class:`~coven_codex.cluster.keys.ClusterKeys`): its lease (the
fencing token, a decimal string, with a time to live), the lease's holder (a daemon id, same
time to live), the token counter (``INCR``, never reset: tokens only grow), and the entry in the
expiry index (a sorted set scored by the time, in Redis's own clock, at which the lease runs out).
Times are read from Redis (``TIME``), never from a daemon's clock, so daemons with skewed clocks
agree on who holds what.
"""

from __future__ import annotations

from typing import Final

NOW_MS: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

CLAIM: Final = (
    NOW_MS
    + """
-- KEYS: lease, holder, counter, expiry index, floor
-- ARGV: daemon id, ttl ms, conversation, position, report list name without its token
local current = redis.call('GET', KEYS[1])
if current then
  local holder = redis.call('GET', KEYS[2])
  if holder ~= ARGV[1] then
    return {0, current, holder or ''}
  end
end
local token = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], tostring(token), 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), ARGV[3])
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], ARGV[4], 'NX')
end
local waiting = ARGV[5] .. 'next'
if redis.call('EXISTS', waiting) == 1 then
  redis.call('RENAME', waiting, ARGV[5] .. tostring(token))
end
return {1, tostring(token), ARGV[1]}
"""
)
"""Take the lease when nobody holds it, or when its holder is this very daemon id (a restart of
the same state directory: only one process can hold that directory's lock). Reports made while
nobody held the lease become this claim's (:data:`REPORT`). A claim
made at a thought sets the floor there unless one is known (the thoughts of the conversation other
daemons passed over from now on, because we hold it, lie after it: should we lose the lease before
we mirror anything, the next owner still answers them). Returns
``{1, token, holder}`` or ``{0, token, holder}`` naming the other holder."""

RENEW: Final = (
    NOW_MS
    + """
-- KEYS: lease, holder, expiry index; ARGV: token, ttl ms, conversation
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[3])
return 1
"""
)
"""Compare-and-extend: only while the lease still holds our token."""

RELEASE: Final = """
-- KEYS: lease, holder, expiry index; ARGV: token, conversation
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZADD', KEYS[3], 0, ARGV[2])
return 1
"""
"""Compare-and-delete; the expiry index then shows the conversation as free since forever."""

NOTE_UNCLAIMED: Final = (
    NOW_MS
    + """
-- KEYS: lease, expiry index, floor; ARGV: ttl ms, conversation, position
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('ZADD', KEYS[2], 'NX', now + tonumber(ARGV[1]), ARGV[2])
redis.call('SET', KEYS[3], ARGV[3], 'NX')
return 1
"""
)
"""A daemon passed over a thought of a conversation nobody holds (another daemon is preferred):
if nobody claims it within a lease time, the sweepers see it in the expiry index; the floor
(where its unanswered thoughts start) is set unless one is known."""

EXPIRED: Final = (
    NOW_MS
    + """
-- KEYS: expiry index; ARGV: how many at most
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
"""
)
"""Conversations whose lease ran out (or was released, or never taken in time)."""

SAVE_STATE: Final = """
-- KEYS: lease, state hash, floor; ARGV: token, writer, state json, floor
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], 'writer', ARGV[2], 'token', ARGV[1], 'state', ARGV[3])
redis.call('SET', KEYS[3], ARGV[4])
return 1
"""
"""A fenced save of a conversation's state and floor."""

APPEND_ROLLOUT: Final = """
-- KEYS: lease, rollout hash, rollout data; ARGV: token, thread, relative path, offset, bytes
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
if redis.call('HGET', KEYS[2], 'thread') ~= ARGV[2] then
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[2], 'thread', ARGV[2], 'path', ARGV[3])
end
local length = redis.call('STRLEN', KEYS[3])
if length == tonumber(ARGV[4]) then
  length = redis.call('APPEND', KEYS[3], ARGV[5])
end
return length
"""
"""A fenced append of rollout bytes at ``offset``: written only when the copy is exactly that long
(so a repeated append is a no-op); returns the copy's length, or -1 when fenced out. A new thread
replaces the copy of the old one."""

REPORT: Final = """
-- KEYS: lease, the reporter's kept report; ARGV: report list name without its token, report, ttl s,
-- ttl s while nobody holds it
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
local token = redis.call('GET', KEYS[1])
local key = ARGV[1] .. 'next'
local ttl = ARGV[4]
if token then
  key = ARGV[1] .. token
  ttl = ARGV[3]
end
redis.call('RPUSH', key, ARGV[2])
redis.call('EXPIRE', key, ttl)
if token then
  return 1
end
return 2
"""
"""A previous owner's report of its own rollout, to the list of the token that holds the lease now:
only that holder reads it (a claimant that lost the lease meanwhile waits on its own token's list).
Nobody holding the lease (it ran out, e.g. while Redis was frozen, and nobody claimed it yet), it
goes to the ``next`` list, which the next :data:`CLAIM` makes its own. (The list's name is made
here from the token just read, so the report cannot go to a holder that lost the lease in between:
a single Redis, not Redis Cluster.) The report is also kept, unconsumed, under the reporter's name
(``reported:<conversation>:<daemon>``), for a later claimant: the holder it went to may lose the lease
before it finishes adopting, and the reporter reports once."""

HEARTBEAT: Final = (
    NOW_MS
    + """
-- KEYS: daemon index[, the hold of a daemon without cluster (on joining)]; ARGV: daemon id, ttl ms
if #KEYS == 2 then
  local single = redis.call('GET', KEYS[2])
  if single then return {-1, {single}} end
end
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
local was_live = 0
if expires and tonumber(expires) > now then
  was_live = 1
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return {was_live, redis.call('ZRANGE', KEYS[1], 0, -1)}
"""
)
"""Say this daemon is alive for another ttl, drop the daemons whose heartbeat ran out; returns
``{was_live, live daemons}``: ``was_live`` is 0 when this daemon was not in the live set (it just
joined, or its heartbeat ran out: it stalled, or Redis was unreachable for longer than a ttl). On
joining, the hold of a daemon serving the journal without cluster (``KEYS[2]``) refuses:
``{-1, {its holder record}}``, and nothing is written."""
