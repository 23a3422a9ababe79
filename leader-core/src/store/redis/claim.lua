-- claim: the group's live claim on its next free slot, for a leader that looks for a better
-- candidate and for tools.
-- KEYS[1] group
-- ARGV: none
-- Reply: {}                                            no live claim
--        {expires_in_ms, waited_ms, priority, holder}  the claim
local now = server_time()
local until_ms, _, arrival, priority, holder = claim_of(redis.call('HGET', KEYS[1], 'reserved'), now)
if not until_ms then
  return {}
end
return {until_ms - now, math.max(0, now - arrival), priority, holder}
