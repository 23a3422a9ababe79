-- renew_many: renew.lua for many slots in one call (a node's partition leases), outside a
-- Cluster only: a shortening renewal touches the group's full marker, which is derived here
-- from the group's key rather than declared.
-- KEYS[i] group i
-- ARGV[1] lease_ms, ARGV[2] idle group TTL in ms, ARGV[3] the release channels' prefix,
-- ARGV[3 + i] token i
-- Reply: {now_ms, r1, r2, ...}: ri is slot i's new expiry in ms, or 0 when it is not held
-- Every slot gets the same new expiry, so its text and the groups' is made once: the hot
-- path per slot is one HGET, one HSET and one PEXPIREAT.
local now = server_time()
local renewed = now + tonumber(ARGV[1])
local renewed_text = string.format('%d', renewed)
local outlive_text = string.format('%d', renewed + tonumber(ARGV[2]))
local reply = {now}
for i = 1, #KEYS do
  local group, token = KEYS[i], ARGV[3 + i]
  local expires, rest = live_record(redis.call('HGET', group, token), now)
  if expires then
    redis.call('HSET', group, token, renewed_text .. rest)
    redis.call('PEXPIREAT', group, outlive_text, 'GT')
    -- As in renew.lua: a shorter lease wakes the group's waiters and watchers.
    if renewed < expires then
      local found = redis.call('HMGET', group, 'waiting', 'watched')
      -- "{K}:group": the marker is "{K}:full", the channel the prefix and K.
      if found[1] then
        full_until_at_most(string.sub(group, 1, -6) .. 'full', renewed)
      end
      if found[1] or watched_at(found[2], now) then
        redis.call('PUBLISH', ARGV[3] .. string.sub(group, 2, -8), '')
      end
    end
    reply[i + 1] = renewed
  else
    reply[i + 1] = 0
  end
end
return reply
