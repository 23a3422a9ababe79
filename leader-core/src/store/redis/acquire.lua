-- acquire: grant a free slot, return the same grant to a retry, or report the nearest expiry.
-- KEYS[1] group, KEYS[2] fence
-- ARGV[1] token, ARGV[2] holder, ARGV[3] lease_ms, ARGV[4] max_leaders, ARGV[5] grant channel
-- Reply: {1, fence, acquired_ms, expires_ms, now_ms}   granted (new, or already held by token)
--        {0, nearest_expiry_in_ms}                      full
--        {2, existing_max_leaders}                      live slots granted under another N
-- One read of the whole group decides; every key is read before it is written, so a key
-- holding another type fails with WRONGTYPE before anything is changed.
local group, fence_key = KEYS[1], KEYS[2]
local token, lease, max = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])

local fields = redis.call('HGETALL', group)
local live, nearest, expired, existing, last = 0, nil, {}, nil, 0
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  if field == 'max' then
    existing = tonumber(value)
  elseif field == 'fence' then
    last = tonumber(value) or 0
  else
    local expires, fence, acquired = parse_slot(value)
    if expires and expires > now then
      if field == token then
        return {1, fence, acquired, expires, now}
      end
      live = live + 1
      if not nearest or expires < nearest then
        nearest = expires
      end
    else
      expired[#expired + 1] = field
    end
  end
end
if live > 0 and existing and existing ~= max then
  return {2, existing}
end
if live >= max then
  return {0, nearest - now}
end

local stored = redis.call('GET', fence_key)
if stored and not tonumber(stored) then
  return redis.error_reply('WRONGTYPE fence key holds a value that is not a number')
end
-- Strictly above every earlier fence, and above the clock in microseconds, so fences keep
-- increasing even after the server lost its data.
local fence = math.max(math.max(last, tonumber(stored) or 0) + 1, tonumber(time[1]) * 1000000 + tonumber(time[2]))
local expires = now + lease
if #expired > 0 then
  redis.call('HDEL', group, unpack(expired))
end
local fence_text = string.format('%d', fence)
redis.call('SET', fence_key, fence_text)
redis.call('HSET', group, token, slot_record(expires, fence, now, ARGV[2]), 'max', ARGV[4], 'fence', fence_text)
keep_group_until(group, expires, live == 0)
redis.call('PUBLISH', ARGV[5], '')
return {1, fence, now, expires, now}
