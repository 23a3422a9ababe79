-- release: free a live slot held under the token, or keep it until its minimum lease ends;
-- either way wake the candidates that may wait for a slot.
-- KEYS[1] group, KEYS[2] full marker
-- ARGV[1] token, ARGV[2] min_lease_ms, ARGV[3] release channel
-- Reply: {1}                    released
--        {2, expires_in_ms}     kept until the minimum lease ends
--        {0}                    not held
local group, token = KEYS[1], ARGV[1]
local now = server_time()
local found = redis.call('HMGET', group, token, 'waiting', 'watched')
local expires, rest = live_record(found[1], now)
if not expires then
  return {0}
end
local reply = {1}
-- A minimum lease keeps the slot until acquired + min_lease; without one it always ends now.
local keep_until = 0
if ARGV[2] ~= '0' then
  keep_until = tonumber(string.match(rest, '^:%d+:(%d+):')) + tonumber(ARGV[2])
end
if keep_until > now then
  -- Waiters learn the sooner expiry from the attempt this wakes; "waiting" stays.
  local kept = math.min(expires, keep_until)
  redis.call('HSET', group, token, with_expiry(kept, rest))
  if found[2] then
    full_until_at_most(KEYS[2], kept)
  end
  reply = {2, kept - now}
elseif found[2] then
  -- The group's max and fence stay until the group expires, `idle` after its longest slot.
  -- It is no longer full.
  redis.call('HDEL', group, token, 'waiting')
  if our_marker(KEYS[2]) then
    redis.call('DEL', KEYS[2])
  end
else
  redis.call('HDEL', group, token)
end
if found[2] or watched_at(found[3], now) then
  redis.call('PUBLISH', ARGV[3], '')
end
return reply
