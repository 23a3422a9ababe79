-- release: free a live slot held under the token, or keep it until its minimum lease ends;
-- either way wake waiters on the group's release channel.
-- KEYS[1] group
-- ARGV[1] token, ARGV[2] min_lease_ms, ARGV[3] release channel
-- Reply: {1}                    released
--        {2, expires_in_ms}     kept until the minimum lease ends
--        {0}                    not held
local group, token = KEYS[1], ARGV[1]
local expires, fence, acquired, holder = live_slot(group, token)
if not expires then
  return {0}
end
local reply = {1}
local keep_until = acquired + tonumber(ARGV[2])
if keep_until > now then
  local kept = math.min(expires, keep_until)
  redis.call('HSET', group, token, slot_record(kept, fence, acquired, holder))
  reply = {2, kept - now}
else
  -- The group's other fields stay until its expiry; with no live slot they mean nothing.
  redis.call('HDEL', group, token)
end
redis.call('PUBLISH', ARGV[3], '')
return reply
