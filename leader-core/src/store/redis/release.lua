-- release: free a live slot held under the token, or keep it until its minimum lease ends;
-- either way wake waiters on the group's release channel.
-- KEYS[1] slots, KEYS[2] holders
-- ARGV[1] token, ARGV[2] min_lease_ms, ARGV[3] release channel
-- Reply: {1}                    released
--        {2, expires_in_ms}     kept until the minimum lease ends
--        {0}                    not held
local slots, holders, token, min_lease = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local expiry = tonumber(redis.call('ZSCORE', slots, token))
if not expiry or expiry <= now then
  return {0}
end
local reply = {1}
if min_lease > 0 then
  local acquired = tonumber(string.match(redis.call('HGET', holders, token) or '', '^%d+:(%d+):'))
  local keep_until = (acquired or 0) + min_lease
  if keep_until > now then
    local expires = math.min(expiry, keep_until)
    redis.call('ZADD', slots, string.format('%d', expires), token)
    reply = {2, expires - now}
  end
end
if reply[1] == 1 then
  redis.call('ZREM', slots, token)
  if redis.call('ZCARD', slots) == 0 then
    redis.call('DEL', holders) -- the last slot: the sorted set went with it
  else
    redis.call('HDEL', holders, token)
  end
end
-- The keys may outlive the slots left (their expiry only moves later); that is harmless.
redis.call('PUBLISH', ARGV[3], '')
return reply
