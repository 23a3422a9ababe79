-- acquire: grant a free slot, return the same grant to a retry, or report the nearest expiry.
-- KEYS[1] slots, KEYS[2] holders, KEYS[3] fence
-- ARGV[1] token, ARGV[2] holder, ARGV[3] lease_ms, ARGV[4] max_leaders, ARGV[5] grant channel
-- Reply: {1, fence, acquired_ms, expires_ms, now_ms}   granted (new, or already held by token)
--        {0, nearest_expiry_in_ms}                      full
--        {2, existing_max_leaders}                      live slots granted under another N
-- Every write comes after the reads of the key it writes, so a key holding another type
-- fails with WRONGTYPE before anything of it is changed.
local slots, holders, fence_key = KEYS[1], KEYS[2], KEYS[3]
local token, lease, max = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])

local expiry = tonumber(redis.call('ZSCORE', slots, token))
if expiry and expiry > now then
  local info = redis.call('HGET', holders, token)
  if info then
    local fence, acquired = string.match(info, '^(%d+):(%d+):')
    return {1, tonumber(fence), tonumber(acquired), expiry, now}
  end
end

-- Read before any write: HGET also proves the holders key is a hash.
local existing = tonumber(redis.call('HGET', holders, 'max'))
local count = redis.call('ZCARD', slots)
if count > 0 then
  local expired = redis.call('ZRANGEBYSCORE', slots, '-inf', now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
    redis.call('HDEL', holders, unpack(expired))
    count = count - #expired
  end
end
if count > 0 then
  if existing and existing ~= max then
    return {2, existing}
  end
  if count >= max then
    local first = redis.call('ZRANGE', slots, 0, 0, 'WITHSCORES')
    return {0, tonumber(first[2]) - now}
  end
end

local last = redis.call('GET', fence_key)
if last and not tonumber(last) then
  return redis.error_reply('WRONGTYPE fence key holds a value that is not a number')
end
-- Strictly above every earlier fence, and above the clock in microseconds, so fences keep
-- increasing even after the server lost its data.
local fence = math.max((tonumber(last) or 0) + 1, tonumber(time[1]) * 1000000 + tonumber(time[2]))
local expires = now + lease
redis.call('SET', fence_key, string.format('%d', fence))
redis.call('ZADD', slots, string.format('%d', expires), token)
redis.call('HSET', holders, token, string.format('%d:%d:%s', fence, now, ARGV[2]), 'max', ARGV[4])
keep_keys_until(slots, holders, expires, count == 0)
redis.call('PUBLISH', ARGV[5], '')
return {1, fence, now, expires, now}
