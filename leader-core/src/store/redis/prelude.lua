-- Shared by every script (prepended to each): the server clock and key lifetimes.
--
-- A group K lives in three keys that share the hash tag {K}:
--   {K}:slots    sorted set, token -> expiry (ms, server time)
--   {K}:holders  hash, token -> "fence:acquired_ms:holder", and "max" -> max_leaders
--   {K}:fence    string, the last fence handed out; no TTL, so fences never go back
-- The first two expire no sooner than the group's longest live slot. Numbers passed back to
-- Redis go through string.format('%d'), since Lua's own conversion keeps 14 digits.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Makes the slot and holder keys live at least until `expires`. When the group had no live
-- slot the keys may be new (no TTL yet), so the expiry is set outright; otherwise GT only
-- ever moves it later, which needs no look at the other slots.
local function keep_keys_until(slots, holders, expires, group_was_empty)
  local at = string.format('%d', expires)
  if group_was_empty then
    redis.call('PEXPIREAT', slots, at)
    redis.call('PEXPIREAT', holders, at)
  else
    redis.call('PEXPIREAT', slots, at, 'GT')
    redis.call('PEXPIREAT', holders, at, 'GT')
  end
end
