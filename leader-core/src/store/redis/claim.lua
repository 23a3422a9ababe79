-- claim: the group's live claim on its next free slot, for a leader that looks for a better
-- candidate and for tools, with the holder an operator prefers, if any.
-- KEYS[1] group, KEYS[2] preferred holder
-- ARGV: none
-- Reply: {}                                                       no live claim
--        {expires_in_ms, waited_ms, priority, holder, preferred}  the claim (preferred: the
--                                                                 holder, or '' for none)
local now = server_time()
local until_ms, _, arrival, priority, holder = claim_of(redis.call('HGET', KEYS[1], 'reserved'), now)
if not until_ms then
  return {}
end
local preferred = preferred_holder(KEYS[2]) or ''
return {until_ms - now, math.max(0, now - arrival), priority, holder, preferred}
