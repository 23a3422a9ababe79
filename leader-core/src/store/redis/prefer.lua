-- prefer: records the holder an operator prefers for a group, or withdraws the preference.
-- KEYS[1] preferred holder
-- ARGV[1] the holder id, or '' to withdraw; ARGV[2] how long it lives, ms
-- Reply: 1; a WRONGTYPE error, changing nothing, when another's value of another type is
-- there (this store writes only strings at that key).
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a preference')
end
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
