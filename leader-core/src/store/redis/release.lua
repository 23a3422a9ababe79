-- release: free a live slot held under the token, or keep it until its minimum lease ends;
-- either way wake waiters on the group's release channel.
-- KEYS[1] group, KEYS[2] full marker
-- ARGV[1] token, ARGV[2] min_lease_ms, ARGV[3] release channel
-- Reply: {1}                    released
--        {2, expires_in_ms}     kept until the minimum lease ends
--        {0}                    not held
local group, token, min_lease = KEYS[1], ARGV[1], tonumber(ARGV[2])
local _, now = server_time()
local expires, rest = live_record(redis.call('HGET', group, token), now)
if not expires then
  return {0}
end
local reply = {1}
-- A minimum lease keeps the slot until acquired + min_lease; without one it always ends now.
local keep_until = 0
if min_lease > 0 then
  keep_until = tonumber(string.match(rest, '^:%d+:(%d+):')) + min_lease
end
if keep_until > now then
  local kept = math.min(expires, keep_until)
  redis.call('HSET', group, token, with_expiry(kept, rest))
  full_until_at_most(KEYS[2], kept)
  reply = {2, kept - now}
else
  -- The group's max and fence stay until the group expires, `idle` after its longest
  -- slot. It is no longer full.
  redis.call('HDEL', group, token)
  if our_marker(KEYS[2]) then
    redis.call('DEL', KEYS[2])
  end
end
redis.call('PUBLISH', ARGV[3], '')
return reply
