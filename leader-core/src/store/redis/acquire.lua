-- acquire, after acquire_refusal.lua (which defines group, full_key and token, and refuses
-- a group its marker says is full) and the prelude.
local now, clock = server_time()

-- A request that claims the next free slot (ARGV[7], "waited_ms:hold_ms:priority") takes
-- the group's claim, unless a live one that goes first holds it: the holder an operator
-- prefers (KEYS[3], read only when two claims meet), then a higher priority, then the same
-- priority and an arrival no later; its own claim lives on from now. Made before
-- the free slots are counted, so a waiter that takes the claim over takes the slot it was
-- kept for. Answers the live claim after it: until when, for which token, and the
-- request's own hold (nil when it made no claim). A server out of memory refuses the write
-- (pcall): the claim stays as it was.
local function claim_next_slot(value, now)
  local until_ms, owner, owner_arrival, owner_priority, owner_holder = claim_of(value, now)
  local waited, hold, priority = string.match(ARGV[7], '^(%d+):(%d+):(%-?%d+)$')
  if not waited then
    return until_ms, owner, nil
  end
  local arrival = now - tonumber(waited)
  priority = tonumber(priority)
  if until_ms and owner == token then
    arrival = math.min(arrival, owner_arrival)
  elseif until_ms then
    local preferred = preferred_holder(KEYS[3])
    local owner_first = owner_holder == preferred
    if owner_first == (ARGV[2] == preferred) then
      owner_first = owner_priority > priority
        or (owner_priority == priority and owner_arrival <= arrival)
    end
    if owner_first then
      return until_ms, owner, tonumber(hold)
    end
  end
  local claimed = now + tonumber(hold)
  local written = redis.pcall('HSET', group, 'reserved',
    string.format('%d:%d:%d:%s:%s', claimed, arrival, priority, token, ARGV[2]))
  if type(written) == 'table' and written.err then
    return until_ms, owner, tonumber(hold)
  end
  return claimed, token, tonumber(hold)
end

local fields = redis.call('HGETALL', group)
local live, nearest, latest, existing, last = 0, nil, 0, nil, nil
local stale, waiting, watched, reserved = nil, false, false, nil
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  if field == 'max' then
    existing = value
  elseif field == 'reserved' then
    reserved = value
  elseif field == 'fence' then
    last = value
  elseif field == 'waiting' then
    waiting = true
  elseif field == 'watched' then
    watched = watched_at(value, now)
    if watched then
      -- The watch is kept as a live slot would be.
      latest = math.max(latest, tonumber(value))
    end
  elseif string.byte(field) == WATCHER_BYTE then
    -- A watcher's own announcement: "watched" above stands for it. A lapsed one (a
    -- watcher that went without withdrawing) goes with the expired records.
    if (tonumber(value) or 0) <= now then
      stale = stale or {}
      stale[#stale + 1] = field
    end
  else
    local expires = record_expiry(value)
    if expires and expires > now then
      if field == token then
        local _, fence, acquired = parse_slot(value)
        return {1, fence, acquired, expires, now}
      end
      live = live + 1
      if not nearest or expires < nearest then
        nearest = expires
      end
      latest = math.max(latest, expires)
    else
      stale = stale or {}
      stale[#stale + 1] = field
    end
  end
end
if live > 0 then
  -- max_leaders as the caller wrote it, compared as text: the store writes it from ARGV[4].
  if existing and existing ~= ARGV[4] then
    return {2, tonumber(existing)}
  end
  if live >= tonumber(ARGV[4]) then
    -- Mark the group full until just before its nearest expiry, so the attempts that follow
    -- are refused without the clock or the records, and the releases that follow publish,
    -- for this candidate may wait. A server out of memory refuses the writes (pcall): the
    -- refusal stands, and a waiter wakes at the nearest expiry.
    if not waiting then
      redis.pcall('HSET', group, 'waiting', '1')
    end
    if nearest - 1 > now then
      redis.pcall('SET', full_key, FULL_PREFIX .. ARGV[4], 'PXAT', string.format('%d', nearest - 1))
    end
    -- The claim's holder asks again within half the claim's life, so it lives on; a
    -- request that claims behind another's claim asks again when that claim would lapse.
    local claim_until, owner, hold = claim_next_slot(reserved, now)
    if hold and owner == token then
      return {0, math.min(nearest - now, math.floor(hold / 2))}
    elseif hold and claim_until then
      return {0, math.min(nearest, claim_until) - now}
    end
    return {0, nearest - now}
  end
end

-- A free slot. The group's last one is kept for the token its live claim names.
local claim_until, claim_token = claim_next_slot(reserved, now)
if claim_until and claim_token ~= token and tonumber(ARGV[4]) - live == 1 then
  if not waiting then
    redis.pcall('HSET', group, 'waiting', '1')
  end
  return {0, claim_until - now}
end

-- Strictly above every earlier fence, and above the clock in microseconds, so fences keep
-- increasing even after the server lost its data; exact over the whole u64 range.
local fence_text = string.format('%d', clock)
if last and not fence_above(fence_text, last) then
  fence_text = fence_after(last)
  if fence_above(fence_text, MAX_FENCE) then
    return redis.error_reply('ERR the fences of group ' .. group .. ' are exhausted: the last is ' .. last)
  end
end
local lease = tonumber(ARGV[3])
local expires = now + lease
if waiting and not (claim_until and claim_token == token) then
  -- A slot was freed since the refusal that set it, which woke that candidate. (Unless this
  -- grant ends a claim: the candidates its claim held back wait for the next release.)
  stale = stale or {}
  stale[#stale + 1] = 'waiting'
end
if claim_token == token or (reserved and not claim_until) then
  -- This token's claim, now served (made by this request, perhaps), or a lapsed one.
  stale = stale or {}
  stale[#stale + 1] = 'reserved'
end
if stale then
  redis.call('HDEL', group, unpack(stale))
end
local record = string.format('%d:%s:%d:%s', expires, fence_text, now, ARGV[2])
redis.call('HSET', group, token, record, 'max', ARGV[4], 'fence', fence_text)
-- Idle `idle` after the longest live slot; set from every live slot, so this also shortens
-- an expiry that a longer slot, now ended, had set.
if latest <= expires then
  redis.call('PEXPIRE', group, ARGV[6])
else
  redis.call('PEXPIREAT', group, string.format('%d', latest + tonumber(ARGV[6]) - lease))
end
if watched then
  redis.call('PUBLISH', ARGV[5], '')
end
return {1, fence_text, now, expires, now}
