-- revoke: end a slot for a caller that was not granted it (an operator's tool, another
-- service), named by its token or by its fence.
-- KEYS[1] group, KEYS[2] full marker
-- ARGV[1] the slot's token, or '' to name it by ARGV[2], its fence (decimal digits)
-- ARGV[3] '1': free it now (as a release); '0': move it to ARGV[4], a token nobody holds,
--         so its holder's renewals and release find nothing from now on and it lapses at
--         its expiry, when the holder's deadline has passed
-- ARGV[5] release channel
-- Reply: {1}                    freed now
--        {2, expires_in_ms}     held by nobody, it lapses then
--        {0}                    no such live slot
local group = KEYS[1]
local now = server_time()
local token, record = ARGV[1], false
if token ~= '' then
  record = redis.call('HGET', group, token)
else
  local fields = redis.call('HGETALL', group)
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field ~= 'max' and field ~= 'fence' and field ~= 'waiting' and field ~= 'watched'
        and field ~= 'reserved' and string.byte(field) ~= WATCHER_BYTE then
      local _, fence = parse_slot(value)
      if fence == ARGV[2] then
        token, record = field, value
        break
      end
    end
  end
end
local expires = live_record(record, now)
if not expires then
  return {0}
end
if ARGV[3] == '0' then
  -- The same record under a token nobody has: the group stays as full as it was.
  redis.call('HDEL', group, token)
  redis.call('HSET', group, ARGV[4], record)
  return {2, expires - now}
end
local found = redis.call('HMGET', group, 'waiting', 'watched')
if found[1] then
  redis.call('HDEL', group, token, 'waiting')
  if our_marker(KEYS[2]) then
    redis.call('DEL', KEYS[2])
  end
else
  redis.call('HDEL', group, token)
end
if found[1] or watched_at(found[2], now) then
  redis.call('PUBLISH', ARGV[5], '')
end
return {1}
