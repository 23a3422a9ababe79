-- prefer: records the holder an operator prefers for a group, or withdraws the preference.
-- KEYS[1] preferred holder
-- ARGV[1] the holder id, or '' to withdraw; ARGV[2] how long it lives, ms
-- Reply: 1
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
