-- Shared by every script (prepended to each): the server clock and slot records.
--
-- A group K lives in one hash, {K}:group (the braces make it a Cluster hash tag):
--   token -> "expires_ms:fence:acquired_ms:holder" for each slot,
--   "max" -> max_leaders, "fence" -> the last fence handed out,
--   "waiting" -> "1" while a refused candidate may be waiting for a slot,
--   "reserved" -> "until_ms:arrival_ms:priority:token:holder" while the group's next free
--   slot is kept for a waiter (fair waiting, priorities): the highest priority, then the
--   earliest arrival, among the refused requests that claimed it, until `hold_ms` after its
--   latest claim; a grant to that token ends it,
--   "watched" -> until when (server ms) a tool or observer watches the group change (the
--   latest of the "watcher:<id>" fields, one per watching store and kind of watcher,
--   which the watch script keeps and a grant deletes once lapsed).
-- Each slot expires by its own record, so slots with different leases never lose one
-- another. The hash expires `idle` ms after the longest live slot: a grant sets its expiry
-- from every live record, a renewal only ever extends it, so it never expires while a slot
-- lives, and an idle group disappears. Its last fence goes with it; the next group's first
-- fence is the clock in microseconds, above every fence handed out before (fences never run
-- more than a microsecond ahead of the clock, and `idle` covers a clock that steps back).
-- A release deletes its record and a grant deletes expired ones, so the hash holds at most
-- max_leaders records besides the bookkeeping fields (tokens are 32 hex digits, so no record
-- is named like one of them).
--
-- {K}:preferred, a string: the holder id an operator prefers for the group, expiring with
-- the preference (PX). While it lives, that holder's claim goes before every other.
--
-- {K}:full, the string FULL_PREFIX .. max_leaders, exists only while the group is known to
-- be full: an acquire refused after reading the records sets it to expire just before the
-- group's nearest expiry, a release deletes it, and a renewal or release that moves a
-- slot's expiry earlier moves the marker's expiry with it. While it lives, every slot the
-- group had when it was set is still live, so the attempts that follow are refused on it
-- alone, without the clock or the records. It only ever refuses: a grant always reads the
-- records. Only this store writes that value, so anything else at {K}:full is another's
-- key: an acquire reports it (WRONGTYPE) and nothing ever changes or deletes it.
--
-- Notices cost the server only when someone listens. A candidate waits only after a
-- refusal, and the refusal that sets the marker sets "waiting" too (so the marker lives
-- only while "waiting" is set); a release, or a renewal that ends a slot sooner, publishes
-- on the release channel only while "waiting" is set (or the group is watched), and only
-- then looks at the marker. A release clears "waiting", and so does a grant: a grant needs
-- a slot freed since the refusal, by a release (which published) or by an expiry (no
-- earlier than the refused candidate's own timer, set to the nearest expiry it was told).
-- A grant publishes on the grant channel only while the group is watched.
--
-- Times are server ms. Numbers passed back to Redis go through string.format('%d'): Lua's
-- own conversion keeps 14 digits.

-- The server clock: now in ms, and in µs (for fences). Each tonumber of a string costs the
-- server two parses, so the hot paths convert as few strings as they can.
local function server_time()
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end

-- A slot record's expiry (and where it ends), found without a pattern: a grant reads every
-- record of its group, so this is the hot path.
local function record_expiry(record)
  local colon = string.find(record, ':', 1, true)
  return colon and tonumber(string.sub(record, 1, colon - 1)), colon
end

-- A slot record's fields: expires and acquired (numbers), fence (its digits, as stored:
-- a fence may exceed what a Lua number holds exactly) and holder.
local function parse_slot(record)
  local expires, fence, acquired, holder = string.match(record, '^(%d+):(%d+):(%d+):(.*)$')
  return tonumber(expires), fence, tonumber(acquired), holder
end

-- Fences are kept and compared as decimal digits without leading zeros, never as Lua
-- numbers (doubles, exact only up to 2^53): the longer is the larger, and equal lengths
-- compare as text.
local function fence_above(a, b)
  return #a > #b or (#a == #b and a > b)
end

-- The fence after `digits`: one more, computed digit by digit.
local function fence_after(digits)
  local i = #digits
  while i > 0 and string.byte(digits, i) == 57 do -- '9'
    i = i - 1
  end
  if i == 0 then
    return '1' .. string.rep('0', #digits)
  end
  return string.sub(digits, 1, i - 1) .. string.char(string.byte(digits, i) + 1)
    .. string.rep('0', #digits - i)
end

-- The largest fence a client can hold (2^64 - 1).
local MAX_FENCE = '18446744073709551615'

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

-- Whether a "watched" field's value (or false, when there is none) is still ahead of `now`.
-- The first byte of a "watcher:<id>" field, never that of a token (hex digits); the slot
-- loops look for "waiting" and "watched", which share it, before they test it.
local WATCHER_BYTE = string.byte('w')

local function watched_at(value, now)
  return value and (tonumber(value) or 0) > now
end

-- FULL_PREFIX, the full marker's prefix, comes from full_marker.lua, placed before.

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

-- The live slots of group `key` at `now`, without their tokens (state.lua's reply):
-- {now, max_leaders or 0, fence, acquired_ms, expires_ms, holder, fence, ...}, each fence
-- as its decimal digits.
local function group_state(key, now)
  local fields = redis.call('HGETALL', key)
  local reply = {now, 0}
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == 'max' then
      reply[2] = tonumber(value) or 0
    elseif field ~= 'fence' and field ~= 'waiting' and field ~= 'watched'
        and field ~= 'reserved' and string.byte(field) ~= WATCHER_BYTE then
      local expires = record_expiry(value)
      if expires and expires > now then
        local _, fence, acquired, holder = parse_slot(value)
        reply[#reply + 1] = fence
        reply[#reply + 1] = acquired
        reply[#reply + 1] = expires
        reply[#reply + 1] = holder
      end
    end
  end
  return reply
end

-- The longest a claim may be held (2^47 ms, the store's duration range): a "reserved" field
-- claimed longer than that from now was not written by this store, and counts as none
-- (its end would overflow the reply).
local CLAIM_RANGE = 140737488355328

-- The group's claim on its next free slot ("reserved"), if it is live at `now`: until when,
-- for which token, since when that waiter waits, its priority (a 32-bit integer) and its
-- holder. Anything else there is no claim.
local function claim_of(value, now)
  if not value then
    return nil
  end
  local until_ms, arrival, priority, owner, holder =
    string.match(value, '^(%d+):(%-?%d+):(%-?%d+):(%x+):(.*)$')
  until_ms, arrival, priority = tonumber(until_ms), tonumber(arrival), tonumber(priority)
  if not until_ms or not arrival or not priority or until_ms <= now
      or until_ms > now + CLAIM_RANGE or priority < -2147483648 or priority > 2147483647 then
    return nil
  end
  return until_ms, owner, arrival, priority, holder
end

-- The holder an operator prefers for the group (the string at `key`), and the time it has
-- left (ms); or false: anything but a non-empty string with an expiry (this store always
-- writes one) is no preference.
local function preferred_holder(key)
  local value = redis.pcall('GET', key)
  if type(value) ~= 'string' or value == '' then
    return false
  end
  local left = redis.call('PTTL', key)
  return left > 0 and value, left
end
