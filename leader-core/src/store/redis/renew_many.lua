-- renew_many: renew.lua for many slots in one call (a node's partition leases).
-- KEYS[2i-1] group i, KEYS[2i] its full marker
-- ARGV[1] lease_ms, ARGV[2] idle group TTL in ms, ARGV[2i+1] token i, ARGV[2i+2] its release
-- channel
-- Reply: {now_ms, r1, r2, ...}: ri is slot i's new expiry in ms, or 0 when it is not held
local now = server_time()
local lease, idle = tonumber(ARGV[1]), tonumber(ARGV[2])
local renewed = now + lease
local reply = {now}
for i = 1, #KEYS / 2 do
  local group, token = KEYS[2 * i - 1], ARGV[2 * i + 1]
  local found = redis.call('HMGET', group, token, 'waiting', 'watched')
  local expires, rest = live_record(found[1], now)
  if expires then
    redis.call('HSET', group, token, with_expiry(renewed, rest))
    group_outlives(group, renewed, idle)
    -- As in renew.lua: a shorter lease wakes the group's waiters and watchers.
    if renewed < expires then
      if found[2] then
        full_until_at_most(KEYS[2 * i], renewed)
      end
      if found[2] or watched_at(found[3], now) then
        redis.call('PUBLISH', ARGV[2 * i + 2], '')
      end
    end
    reply[i + 1] = renewed
  else
    reply[i + 1] = 0
  end
end
return reply
