-- acquire: grant a free slot, return the same grant to a retry, or report the nearest expiry.
-- KEYS[1] group, KEYS[2] full marker
-- ARGV[1] token, ARGV[2] holder, ARGV[3] lease_ms, ARGV[4] max_leaders, ARGV[5] grant channel,
-- ARGV[6] idle group TTL in ms
-- Reply: {1, fence, acquired_ms, expires_ms, now_ms}   granted (new, or already held by token)
--        {0, nearest_expiry_in_ms}                      full
--        {2, existing_max_leaders}                      live slots granted under another N
-- A key holding another type, or another's value where the marker goes, fails with
-- WRONGTYPE at the first read, before anything is changed.
local group, full_key = KEYS[1], KEYS[2]
local token, lease, max = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])

-- A full group, known from its marker: refuse without the clock or the records, unless
-- this token holds one of the slots (a retry after a lost reply) or asks with another N.
local marker = redis.call('GET', full_key)
if marker then
  if string.sub(marker, 1, #FULL_PREFIX) ~= FULL_PREFIX then
    return redis.error_reply('WRONGTYPE the full marker key holds a value this store did not write')
  end
  local full_for = redis.call('PTTL', full_key)
  if full_for > 0 and string.sub(marker, #FULL_PREFIX + 1) == ARGV[4]
      and not redis.call('HGET', group, token) then
    return {0, full_for}
  end
end

local time, now = server_time()
local fields = redis.call('HGETALL', group)
local live, nearest, latest, expired, existing, last = 0, nil, 0, nil, nil, 0
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  if field == 'max' then
    existing = tonumber(value)
  elseif field == 'fence' then
    last = tonumber(value) or 0
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
      expired = expired or {}
      expired[#expired + 1] = field
    end
  end
end
if live > 0 and existing and existing ~= max then
  return {2, existing}
end
if live >= max then
  -- Mark the group full until just before its nearest expiry, so the attempts that follow
  -- are refused without the clock or the records. Only an optimisation: a server out of
  -- memory refuses the write (pcall), and the refusal stands without it.
  if nearest - 1 > now then
    redis.pcall('SET', full_key, FULL_PREFIX .. ARGV[4], 'PXAT', string.format('%d', nearest - 1))
  end
  return {0, nearest - now}
end

-- Strictly above every earlier fence, and above the clock in microseconds, so fences keep
-- increasing even after the server lost its data.
local fence = math.max(last + 1, tonumber(time[1]) * 1000000 + tonumber(time[2]))
local expires = now + lease
if expired then
  redis.call('HDEL', group, unpack(expired))
end
local fence_text = string.format('%d', fence)
local record = string.format('%d:%s:%d:%s', expires, fence_text, now, ARGV[2])
redis.call('HSET', group, token, record, 'max', ARGV[4], 'fence', fence_text)
-- From every live slot, so this also shortens an expiry a longer slot that has ended set.
redis.call('PEXPIREAT', group, string.format('%d', math.max(latest, expires) + tonumber(ARGV[6])))
redis.call('PUBLISH', ARGV[5], '')
return {1, fence, now, expires, now}
