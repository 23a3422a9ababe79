-- watch: publish the group's grants and releases for the next ARGV[1] ms, for a tool that
-- subscribes to its channels to watch it change.
-- KEYS[1] group
-- ARGV[1] for how long in ms, ARGV[2] idle group TTL in ms
-- Reply: the server time in ms until which the group is watched
local group = KEYS[1]
local now = server_time()
local watched_until = now + tonumber(ARGV[1])
redis.call('HSET', group, 'watched', string.format('%d', watched_until))
-- Bounded like every other key: a hash made here gets its expiry, a group's is only extended.
local expiry = string.format('%d', watched_until + tonumber(ARGV[2]))
if redis.call('PEXPIREAT', group, expiry, 'GT') == 0 and redis.call('PTTL', group) == -1 then
  redis.call('PEXPIREAT', group, expiry)
end
return watched_until
