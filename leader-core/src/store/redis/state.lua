-- state: the group's live slots, without their tokens.
-- KEYS[1] group
-- ARGV: none
-- Reply: {now_ms, max_leaders or 0, fence, acquired_ms, expires_ms, holder, fence, …}
--        (each fence as its decimal digits)
return group_state(KEYS[1], server_time())
