-- watch: announce (ARGV[1] > 0) or withdraw (ARGV[1] = 0) a watcher's interest in the
-- group's changes. While any watcher's announcement is ahead of the server clock, the
-- group's grants and releases are published. Each watcher (a store, by its id) keeps its own
-- field, "watcher:<id>" -> until when (server ms); "watched" is the latest of them, which is
-- all the other scripts read.
-- KEYS[1] group
-- ARGV[1] for how long in ms (0: withdraw), ARGV[2] idle group TTL in ms, ARGV[3] the
-- watcher's id
-- Reply: the server time in ms until which the group is watched (0: no longer)
local group = KEYS[1]
local now = server_time()
local field = 'watcher:' .. ARGV[3]
if tonumber(ARGV[1]) == 0 then
  if redis.call('HDEL', group, field) == 0 then
    return 0
  end
  -- The latest of the other watchers' announcements; lapsed ones go.
  local latest = 0
  local fields = redis.call('HGETALL', group)
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 8) == 'watcher:' then
      local until_ms = tonumber(fields[i + 1]) or 0
      if until_ms > now then
        latest = math.max(latest, until_ms)
      else
        redis.call('HDEL', group, fields[i])
      end
    end
  end
  if latest > 0 then
    redis.call('HSET', group, 'watched', string.format('%d', latest))
  else
    redis.call('HDEL', group, 'watched')
  end
  return latest
end
local watched_until = now + tonumber(ARGV[1])
redis.call('HSET', group, field, string.format('%d', watched_until))
-- Another watcher may have announced a later time: the group stays watched until then.
local current = tonumber(redis.call('HGET', group, 'watched') or '0') or 0
if current > watched_until then
  watched_until = current
else
  redis.call('HSET', group, 'watched', string.format('%d', watched_until))
end
-- Bounded like every other key: a hash made here gets its expiry, a group's is only extended.
local expiry = string.format('%d', watched_until + tonumber(ARGV[2]))
if redis.call('PEXPIREAT', group, expiry, 'GT') == 0 and redis.call('PTTL', group) == -1 then
  redis.call('PEXPIREAT', group, expiry)
end
return watched_until
