-- state: the group's live slots, without their tokens.
-- KEYS[1] group
-- ARGV: none
-- Reply: {now_ms, max_leaders or 0, fence, acquired_ms, expires_ms, holder, fence, …}
--        (each fence as its decimal digits)
local now = server_time()
local fields = redis.call('HGETALL', KEYS[1])
local reply = {now, 0}
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  if field == 'max' then
    reply[2] = tonumber(value) or 0
  elseif field ~= 'fence' and field ~= 'waiting' and field ~= 'watched'
      and string.byte(field) ~= WATCHER_BYTE then
    local expires = record_expiry(value)
    if expires and expires > now then
      local _, fence, acquired, holder = parse_slot(value)
      reply[#reply + 1] = fence
      reply[#reply + 1] = acquired
      reply[#reply + 1] = expires
      reply[#reply + 1] = holder
    end
  end
end
return reply
