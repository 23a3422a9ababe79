-- renew: extend a live slot held under the token; never revive an expired one.
-- KEYS[1] group, KEYS[2] full marker
-- ARGV[1] token, ARGV[2] lease_ms, ARGV[3] idle group TTL in ms, ARGV[4] release channel
-- Reply: {1, expires_ms, now_ms}   renewed
--        {0}                       not held
local group, token = KEYS[1], ARGV[1]
local now = server_time()
local found = redis.call('HMGET', group, token, 'waiting', 'watched')
local expires, rest = live_record(found[1], now)
if not expires then
  return {0}
end
local renewed = now + tonumber(ARGV[2])
redis.call('HSET', group, token, with_expiry(renewed, rest))
group_outlives(group, renewed, tonumber(ARGV[3]))
-- A shorter lease brings the group's nearest expiry forward: waiters, whose timers are set
-- to the old one, try again and learn the new one.
if renewed < expires then
  if found[2] then
    full_until_at_most(KEYS[2], renewed)
  end
  if found[2] or watched_at(found[3], now) then
    redis.call('PUBLISH', ARGV[4], '')
  end
end
return {1, renewed, now}
