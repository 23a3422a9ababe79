-- Shared by every script (prepended to each): the server clock, slot records and key lifetime.
--
-- A group K lives in one hash, {K}:group (the braces make it a Cluster hash tag):
--   token -> "expires_ms:fence:acquired_ms:holder" for each slot,
--   "max" -> max_leaders, "fence" -> the last fence handed out.
-- The hash has no TTL, so the last fence outlives every slot and fences never go back; each
-- slot expires by its own record, so slots with different leases never lose one another.
-- A release deletes its record and a grant deletes expired ones, so the hash holds at most
-- max_leaders records besides the two fields. Times are server ms. Numbers passed back to
-- Redis go through string.format('%d'): Lua's own conversion keeps 14 digits.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- A slot record's expiry, found without a pattern: every acquire reads every record of its
-- group, so this is the hot path.
local function record_expiry(record)
  local colon = string.find(record, ':', 1, true)
  return colon and tonumber(string.sub(record, 1, colon - 1))
end

-- A slot record's fields: expires, fence, acquired (numbers) and holder.
local function parse_slot(record)
  local expires, fence, acquired, holder = string.match(record, '^(%d+):(%d+):(%d+):(.*)$')
  return tonumber(expires), tonumber(fence), tonumber(acquired), holder
end

-- The live slot held under `token`: its expiry and the rest of its record, or nil when
-- there is none (or it expired).
local function live_slot(group, token)
  local record = redis.call('HGET', group, token)
  if not record then
    return nil
  end
  local colon = string.find(record, ':', 1, true)
  local expires = colon and tonumber(string.sub(record, 1, colon - 1))
  if not expires or expires <= now then
    return nil
  end
  -- The rest of the record after its expiry: ":fence:acquired:holder".
  return expires, string.sub(record, colon)
end

-- The record of a slot expiring at `expires` whose other fields are `rest`.
local function with_expiry(expires, rest)
  return string.format('%d', expires) .. rest
end
