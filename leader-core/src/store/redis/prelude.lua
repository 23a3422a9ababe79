-- Shared by every script (prepended to each): the server clock and slot records.
--
-- A group K lives in one hash, {K}:group (the braces make it a Cluster hash tag):
--   token -> "expires_ms:fence:acquired_ms:holder" for each slot,
--   "max" -> max_leaders, "fence" -> the last fence handed out.
-- Each slot expires by its own record, so slots with different leases never lose one
-- another. The hash expires `idle` ms after the longest live slot: a grant sets its expiry
-- from every live record, a renewal only ever extends it, so it never expires while a slot
-- lives, and an idle group disappears. Its last fence goes with it; the next group's first
-- fence is the clock in microseconds, above every fence handed out before (fences never run
-- more than a microsecond ahead of the clock, and `idle` covers a clock that steps back).
-- A release deletes its record and a grant deletes expired ones, so the hash holds at most
-- max_leaders records besides the two fields.
--
-- {K}:full, the string FULL_PREFIX .. max_leaders, exists only while the group is known to
-- be full:
-- an acquire refused after reading the records sets it to expire just before the group's
-- nearest expiry, a release deletes it, and a renewal or release that moves a slot's
-- expiry earlier moves the marker's expiry with it. While it lives, every slot the group
-- had when it was set is still live, so the attempts that follow are refused on it alone,
-- without the clock or the records. It only ever refuses: a grant always reads the records.
-- Only this store writes that value, so anything else at {K}:full is another's key: an
-- acquire reports it (WRONGTYPE) and nothing ever changes or deletes it.
--
-- Times are server ms. Numbers passed back to Redis go through string.format('%d'): Lua's
-- own conversion keeps 14 digits.

-- The server clock: TIME's reply (seconds, microseconds) and now in ms.
local function server_time()
  local time = redis.call('TIME')
  return time, tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A slot record's expiry (and where it ends), found without a pattern: a grant reads every
-- record of its group, so this is the hot path.
local function record_expiry(record)
  local colon = string.find(record, ':', 1, true)
  return colon and tonumber(string.sub(record, 1, colon - 1)), colon
end

-- A slot record's fields: expires, fence, acquired (numbers) and holder.
local function parse_slot(record)
  local expires, fence, acquired, holder = string.match(record, '^(%d+):(%d+):(%d+):(.*)$')
  return tonumber(expires), tonumber(fence), tonumber(acquired), holder
end

-- A slot record if it is live at `now`: its expiry and the rest of the record after the
-- expiry (":fence:acquired:holder"); nil when there is no record or it expired.
local function live_record(record, now)
  if not record then
    return nil
  end
  local expires, colon = record_expiry(record)
  if not expires or expires <= now then
    return nil
  end
  return expires, string.sub(record, colon)
end

-- The record of a slot expiring at `expires` whose other fields are `rest`.
local function with_expiry(expires, rest)
  return string.format('%d', expires) .. rest
end

local FULL_PREFIX = 'leader-full:'

-- Whether the full marker at `full_key` is this store's (false when there is none, or
-- when another's value of any type is there).
local function our_marker(full_key)
  local value = redis.pcall('GET', full_key)
  return type(value) == 'string' and string.sub(value, 1, #FULL_PREFIX) == FULL_PREFIX
end

-- Keeps the full marker from outliving a slot whose expiry moved earlier, to `expires`.
-- (PEXPIREAT ... LT only ever shortens; another's key is left alone.)
local function full_until_at_most(full_key, expires)
  if our_marker(full_key) then
    redis.call('PEXPIREAT', full_key, string.format('%d', expires - 1), 'LT')
  end
end

-- Keeps the group's keys until `idle` ms after `expires`, a live slot's expiry (GT: only
-- ever later while slots live).
local function group_outlives(group, expires, idle)
  redis.call('PEXPIREAT', group, string.format('%d', expires + idle), 'GT')
end
