-- state_many: the live slots of each group, as state.lua reads one, at one moment.
-- KEYS: the groups (at most RENEW_BATCH_LEN)
-- ARGV: none
-- Reply: {state.lua's reply for KEYS[1], for KEYS[2], …}
local now = server_time()
local replies = {}
for k = 1, #KEYS do
  replies[k] = group_state(KEYS[k], now)
end
return replies
