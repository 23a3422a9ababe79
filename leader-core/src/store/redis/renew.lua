-- renew: extend a live slot held under the token; never revive an expired one.
-- KEYS[1] group, KEYS[2] full marker
-- ARGV[1] token, ARGV[2] lease_ms, ARGV[3] idle group TTL in ms
-- Reply: {1, expires_ms, now_ms}   renewed
--        {0}                       not held
local group, token = KEYS[1], ARGV[1]
local _, now = server_time()
local expires, rest = live_record(redis.call('HGET', group, token), now)
if not expires then
  return {0}
end
local renewed = now + tonumber(ARGV[2])
redis.call('HSET', group, token, with_expiry(renewed, rest))
group_outlives(group, renewed, tonumber(ARGV[3]))
if renewed < expires then
  full_until_at_most(KEYS[2], renewed)
end
return {1, renewed, now}
