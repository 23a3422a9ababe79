-- renew: extend a live slot held under the token; never revive an expired one.
-- KEYS[1] slots, KEYS[2] holders
-- ARGV[1] token, ARGV[2] lease_ms
-- Reply: {1, expires_ms, now_ms}   renewed
--        {0}                       not held
local slots, holders = KEYS[1], KEYS[2]
local expiry = tonumber(redis.call('ZSCORE', slots, ARGV[1]))
if not expiry or expiry <= now then
  return {0}
end
local expires = now + tonumber(ARGV[2])
redis.call('ZADD', slots, string.format('%d', expires), ARGV[1])
keep_keys_until(slots, holders, expires, false)
return {1, expires, now}
