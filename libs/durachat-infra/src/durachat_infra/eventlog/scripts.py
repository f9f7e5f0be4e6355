"""Lua scripts that keep an event log and its stream state consistent."""

from __future__ import annotations

# KEYS: log, state. ARGV: maxlen, kind, frame, target, request, the state change as JSON (also
# stored in the entry, so followers apply the same change), then the change as field/value pairs
# for the state hash, where the value "$id" stands for the id of the entry just added. Appending
# the entry and changing the state in one script lets a gateway read both atomically.
APPEND_WITH_STATE = """
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
  'k', ARGV[2], 'f', ARGV[3], 't', ARGV[4], 'r', ARGV[5], 's', ARGV[6])
local n = #ARGV
if n > 6 then
  local args = {}
  for i = 7, n, 2 do
    args[#args + 1] = ARGV[i]
    if ARGV[i + 1] == '$id' then args[#args + 1] = id else args[#args + 1] = ARGV[i + 1] end
  end
  redis.call('HSET', KEYS[2], unpack(args))
end
return id
"""

# KEYS: log, state. Returns {state hash as a flat list, id of the newest entry or "0-0"}.
SNAPSHOT = """
local state = redis.call('HGETALL', KEYS[2])
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local last_id = '0-0'
if #last > 0 then last_id = last[1][1] end
return {state, last_id}
"""
