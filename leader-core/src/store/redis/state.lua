-- state: the group's live slots, without their tokens.
-- KEYS[1] slots, KEYS[2] holders
-- ARGV: none
-- Reply: {now_ms, max_leaders or 0, fence, acquired_ms, expires_ms, holder, fence, …}
local slots, holders = KEYS[1], KEYS[2]
local reply = {now, tonumber(redis.call('HGET', holders, 'max')) or 0}
local live = redis.call('ZRANGEBYSCORE', slots, string.format('(%d', now), '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local info = redis.call('HGET', holders, live[i])
  local fence, acquired, holder = string.match(info or '', '^(%d+):(%d+):(.*)$')
  if fence then
    reply[#reply + 1] = tonumber(fence)
    reply[#reply + 1] = tonumber(acquired)
    reply[#reply + 1] = tonumber(live[i + 1])
    reply[#reply + 1] = holder
  end
end
return reply
