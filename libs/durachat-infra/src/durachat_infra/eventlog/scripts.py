"""Lua scripts that keep an event log, its stream state and its lease consistent."""

from __future__ import annotations

# KEYS: log, state, lease, appended, log bytes. ARGV: owner, maxlen, batch token, max bytes (0:
# no bound), then six values per entry: kind, frame, target, request, state change as JSON (""
# for none), branch ("" for main). The oldest entries are trimmed while the log holds more than
# about maxlen entries or more than max bytes (of values), the newest entry always kept; the log
# bytes key counts what the log holds (reset when the log was empty before this batch, so a
# deleted log starts over).
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
local added = 0
for i = 5, #ARGV, 6 do
  for j = i, i + 5 do added = added + #ARGV[j] end
  local fields = {'k', ARGV[i], 'f', ARGV[i + 1], 't', ARGV[i + 2], 'r', ARGV[i + 3]}
  if ARGV[i + 4] ~= '' then
    fields[#fields + 1] = 's'
    fields[#fields + 1] = ARGV[i + 4]
  end
  if ARGV[i + 5] ~= '' then
    fields[#fields + 1] = 'b'
    fields[#fields + 1] = ARGV[i + 5]
  end
  local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
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
local len = redis.call('XLEN', KEYS[1])
local size
if len == #ids then
  size = added
  redis.call('SET', KEYS[5], size)
else
  size = redis.call('INCRBY', KEYS[5], added)
end
local maxlen = tonumber(ARGV[2])
local maxbytes = tonumber(ARGV[4])
local over_bytes = maxbytes > 0 and size > maxbytes
if len > maxlen + 64 or over_bytes then
  -- Trimmed in steps (entries down to maxlen, bytes down to the bound) so most appends trim
  -- nothing; an entry's size is counted as it was added: its values.
  while len > 1 and (len > maxlen or (maxbytes > 0 and size > maxbytes)) do
    local old = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', math.min(100, len - 1))
    local dropped = {}
    for _, entry in ipairs(old) do
      if len <= 1 or (len <= maxlen and (maxbytes == 0 or size <= maxbytes)) then break end
      local values = entry[2]
      for j = 2, #values, 2 do size = size - #values[j] end
      dropped[#dropped + 1] = entry[1]
      len = len - 1
    end
    if #dropped == 0 then break end
    redis.call('XDEL', KEYS[1], unpack(dropped))
  end
  if size < 0 then size = 0 end
  redis.call('SET', KEYS[5], size)
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


# KEYS: log, log bytes. Counts the bytes of the log's values again (after entries were trimmed by
# age, which the append script does not see) and returns the count.
RECOUNT_BYTES = """
local size = 0
local after = '-'
while true do
  local rows = redis.call('XRANGE', KEYS[1], after, '+', 'COUNT', 500)
  if #rows == 0 then break end
  for _, entry in ipairs(rows) do
    local values = entry[2]
    for j = 2, #values, 2 do size = size + #values[j] end
  end
  after = '(' .. rows[#rows][1]
end
if size == 0 then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], size) end
return size
"""
