"""Lua scripts that keep an event log, its stream state and its lease consistent."""

from __future__ import annotations

# KEYS: log, state, lease, appended. ARGV: owner, maxlen, batch token, then six values per
# entry: kind, frame, target, request, state change as JSON ("" for none), branch ("" for main).
# A state change is also stored in its entry (so followers apply the same change) and applied to
# the state hash, where the value "$id" stands for the id of the entry just added. Checking the
# lease, appending and changing the state in one script means a former owner can never write,
# and a gateway reading state and log together (SNAPSHOT) always sees them agree. An empty owner
# skips the lease check. A batch whose token is the last one appended was applied already (its
# reply was lost, and the writer sent it again): its ids are returned and nothing is appended,
# whoever holds the lease now.
APPEND = """
if ARGV[3] ~= '' and redis.call('HGET', KEYS[4], 'token') == ARGV[3] then
  return cjson.decode(redis.call('HGET', KEYS[4], 'ids'))
end
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return redis.error_reply('FENCED the conversation lease is held by another shard')
end
local ids = {}
for i = 4, #ARGV, 6 do
  local fields = {'k', ARGV[i], 'f', ARGV[i + 1], 't', ARGV[i + 2], 'r', ARGV[i + 3]}
  if ARGV[i + 4] ~= '' then
    fields[#fields + 1] = 's'
    fields[#fields + 1] = ARGV[i + 4]
  end
  if ARGV[i + 5] ~= '' then
    fields[#fields + 1] = 'b'
    fields[#fields + 1] = ARGV[i + 5]
  end
  local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(fields))
  if ARGV[i + 4] ~= '' then
    local change = cjson.decode(ARGV[i + 4])
    local args = {}
    for field, value in pairs(change) do
      args[#args + 1] = field
      if value == '$id' then args[#args + 1] = id else args[#args + 1] = value end
    end
    if #args > 0 then redis.call('HSET', KEYS[2], unpack(args)) end
  end
  ids[#ids + 1] = id
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[4], 'token', ARGV[3], 'ids', cjson.encode(ids))
  redis.call('PEXPIRE', KEYS[4], 600000)
end
return ids
"""

# KEYS: log, state. Returns {state hash as a flat list, id of the newest entry or "0-0"}.
SNAPSHOT = """
local state = redis.call('HGETALL', KEYS[2])
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local last_id = '0-0'
if #last > 0 then last_id = last[1][1] end
return {state, last_id}
"""

# KEYS: log, state, lease. ARGV: request id, terminal frame, cutoff (ms), the branch's field
# prefix in the state hash ("" for main, "<branch>|" otherwise), the branch ("" for main), the
# state change as JSON. Closes the open stream of `request id` on that branch with the terminal
# frame, but only if no shard holds the conversation, the branch's state still shows that
# request open, and the log's newest entry is older than the cutoff. Returns 1 if it closed it.
CLOSE_ABANDONED = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local p = ARGV[4]
local status = redis.call('HGET', KEYS[2], p .. 'status')
if status ~= 'streaming' and status ~= 'pending' then return 0 end
if redis.call('HGET', KEYS[2], p .. 'req') ~= ARGV[1] then return 0 end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last > 0 then
  local ms = tonumber(string.match(last[1][1], '^(%d+)'))
  if ms > tonumber(ARGV[3]) then return 0 end
end
local fields = {'k', 'd', 'f', ARGV[2], 't', '*', 'r', ARGV[1], 's', ARGV[6]}
if ARGV[5] ~= '' then
  fields[#fields + 1] = 'b'
  fields[#fields + 1] = ARGV[5]
end
redis.call('XADD', KEYS[1], '*', unpack(fields))
redis.call('HSET', KEYS[2], p .. 'status', 'done')
return 1
"""
