-- Shared by every script (prepended to each): the server clock and key lifetimes.
--
-- A group K lives in three keys that share the hash tag {K}:
--   {K}:slots    sorted set, token -> expiry (ms, server time)
--   {K}:holders  hash, token -> "fence:acquired_ms:holder", and "max" -> max_leaders
--   {K}:fence    string, the last fence handed out; no TTL, so fences never go back
-- Numbers passed back to Redis go through string.format('%d'), since Lua's own
-- number-to-string conversion keeps only 14 significant digits.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Lets the slot and holder keys live exactly as long as their longest live slot.
local function follow_longest_slot(slots, holders)
  local longest = redis.call('ZRANGE', slots, -1, -1, 'WITHSCORES')[2]
  if longest then
    redis.call('PEXPIREAT', slots, longest)
    redis.call('PEXPIREAT', holders, longest)
  else
    redis.call('DEL', holders)
  end
end
