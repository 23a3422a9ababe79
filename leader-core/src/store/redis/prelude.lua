-- Shared by every script (prepended to each): the server clock, slot records and key lifetime.
--
-- A group K lives in two keys that share the hash tag {K}:
--   {K}:group  hash: token -> "expires_ms:fence:acquired_ms:holder" for each slot,
--              "max" -> max_leaders, "fence" -> the last fence handed out
--   {K}:fence  string: the last fence as well, with no TTL, so fences never go back
-- The group hash expires no sooner than its longest live slot. Times are server ms. Numbers
-- passed back to Redis go through string.format('%d'): Lua's own conversion keeps 14 digits.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- A slot record's fields: expires, fence, acquired (numbers) and holder.
local function parse_slot(record)
  local expires, fence, acquired, holder = string.match(record, '^(%d+):(%d+):(%d+):(.*)$')
  return tonumber(expires), tonumber(fence), tonumber(acquired), holder
end

-- The live slot held under `token`, parsed, or nil when there is none (or it expired).
local function live_slot(group, token)
  local record = redis.call('HGET', group, token)
  if not record then
    return nil
  end
  local expires, fence, acquired, holder = parse_slot(record)
  if not expires or expires <= now then
    return nil
  end
  return expires, fence, acquired, holder
end

local function slot_record(expires, fence, acquired, holder)
  return string.format('%d:%d:%d:%s', expires, fence, acquired, holder)
end

-- Makes the group hash live at least until `expires`. With no other live slot the key may be
-- new (no TTL yet), so the expiry is set outright; otherwise GT only ever moves it later.
local function keep_group_until(group, expires, alone)
  if alone then
    redis.call('PEXPIREAT', group, string.format('%d', expires))
  else
    redis.call('PEXPIREAT', group, string.format('%d', expires), 'GT')
  end
end
