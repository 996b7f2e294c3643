"""The Lua scripts every change to a Redis journal goes through (atomic on the server).

redis-py's :class:`~redis.commands.core.AsyncScript` runs them with ``EVALSHA`` and loads
them again (``EVAL``) when the server does not know them, e.g. after a restart.
"""

from __future__ import annotations

from typing import Final

_IDS: Final = """
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function less(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
local function field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return false
end
"""

APPEND: Final = (
    _IDS
    + """
-- KEYS: stream, ids, trimmed, then each fence key once
-- ARGV[1]: the entries, one after another, each '<id length> <payload length> <fence> <token>\\n<id><payload>'
-- (fence: the index of its key in KEYS, 0: none; token: empty without a fence); one argument for the
-- whole batch, so that the client packs one string, not four per entry
-- One reply per entry, one string (one bulk reply each is cheap to read):
-- 'new PREVIOUS ID' | 'known PREVIOUS ID[ PAYLOAD]' | 'fenced[ HELD]' (HELD: what the key holds) | 'error WHY'
local replies = {}
local previous = false
local batch = ARGV[1]
local at = 1
while at <= #batch do
  local _, header_end, id_length, payload_length, fence, token = string.find(batch, '^(%d+) (%d+) (%d+) (%S*)\\n', at)
  if not header_end then return redis.error_reply('malformed append batch at byte ' .. at) end
  id_length, payload_length, fence = tonumber(id_length), tonumber(payload_length), tonumber(fence)
  local entry_id = string.sub(batch, header_end + 1, header_end + id_length)
  local payload = string.sub(batch, header_end + id_length + 1, header_end + id_length + payload_length)
  at = header_end + id_length + payload_length + 1
  local reply = false
  local known = redis.call('HGET', KEYS[2], entry_id)
  if known then
    local before, id = string.match(known, '^(%S+) (%S+)$')
    local found = redis.call('XRANGE', KEYS[1], id, id)
    reply = 'known ' .. before .. ' ' .. id
    if #found == 1 then
      local text = field(found[1][2], 'entry')
      if text then reply = reply .. ' ' .. text end
    end
  elseif fence > 0 then
    local held = redis.pcall('GET', KEYS[fence])
    if type(held) == 'table' and held.err then
      reply = 'error ' .. held.err
    elseif not held then
      reply = 'fenced'
    elseif held ~= token then
      reply = 'fenced ' .. held
    end
  end
  if not reply then
    if not previous then
      previous = redis.call('GET', KEYS[3]) or '0-0'
      local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
      if #last == 1 then previous = last[1][1] end
    end
    local id = redis.call('XADD', KEYS[1], '*', 'entry', payload)
    redis.call('HSET', KEYS[2], entry_id, previous .. ' ' .. id)
    reply = 'new ' .. previous .. ' ' .. id
    previous = id
  end
  replies[#replies + 1] = reply
end
return replies
"""
)
"""Append a batch of entries, each once per entry id and in order, as if one after another: a known id
gives back the first record; a fence that does not hold refuses that entry alone (so does a fence
key Redis cannot read, with its error); the others are appended all the same."""

READ: Final = (
    _IDS
    + """
-- KEYS: stream, trimmed; ARGV: after (exclusive), last (inclusive, or '+'), count
local trimmed = redis.call('GET', KEYS[2]) or '0-0'
local after = ARGV[1]
if after == '0-0' then
  after = trimmed
elseif less(after, trimmed) then
  return {'trimmed', trimmed}
end
local low = '(' .. after
if after == '0-0' then low = '-' end
return {'ok', after, redis.call('XRANGE', KEYS[1], low, ARGV[2], 'COUNT', ARGV[3])}
"""
)
"""Entries after a position, refused when compaction removed some of them (start ``0-0``: the oldest kept)."""

END: Final = """
-- KEYS: stream, trimmed
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 1 then return last[1][1] end
return redis.call('GET', KEYS[2]) or '0-0'
"""
"""The id of the last entry (the trim point, or ``0-0``, when there is none)."""

TRIM: Final = (
    _IDS
    + """
-- KEYS: stream, ids, trimmed; ARGV: last id to remove (inclusive), count
local entries = redis.call('XRANGE', KEYS[1], '-', ARGV[1], 'COUNT', ARGV[2])
if #entries == 0 then return {0, false} end
for _, entry in ipairs(entries) do
  local payload = field(entry[2], 'entry')
  if payload then
    local ok, value = pcall(cjson.decode, payload)
    if ok and type(value) == 'table' and type(value['id']) == 'string' then
      local known = redis.call('HGET', KEYS[2], value['id'])
      if known and string.match(known, ' (%S+)$') == entry[1] then redis.call('HDEL', KEYS[2], value['id']) end
    end
  end
end
local last = entries[#entries][1]
local ms, seq = parse(last)
redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d-%d', ms, seq + 1))
local trimmed = redis.call('GET', KEYS[3])
if not trimmed or less(trimmed, last) then redis.call('SET', KEYS[3], last) end
return {#entries, last}
"""
)
"""Remove the oldest entries up to an id (a batch at a time) with their idempotency index entries."""
