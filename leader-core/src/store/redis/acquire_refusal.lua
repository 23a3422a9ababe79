-- acquire, its first part: refuse a group known to be full, before the prelude runs (a
-- refusal, the commonest answer under contention, then costs three reads and nothing
-- else); acquire.lua goes on after the prelude.
--
-- acquire: grant a free slot, return the same grant to a retry, or report the nearest expiry.
-- KEYS[1] group, KEYS[2] full marker, KEYS[3] the operator's preferred holder
-- ARGV[1] token, ARGV[2] holder, ARGV[3] lease_ms, ARGV[4] max_leaders, ARGV[5] grant channel,
-- ARGV[6] lease_ms + the idle group TTL in ms, ARGV[7] a claim to the next free slot,
-- "waited_ms:hold_ms:priority", or '' (see "reserved" and "preferred" in the prelude)
-- Reply: {1, fence, acquired_ms, expires_ms, now_ms}   granted (new, or already held by token;
--                                                      the fence as its decimal digits)
--        {0, nearest_expiry_in_ms}                      full
--        {2, existing_max_leaders}                      live slots granted under another N
-- A key holding another type, or another's value where the marker goes, fails with
-- WRONGTYPE at the first read, before anything is changed.
local group, full_key, token = KEYS[1], KEYS[2], ARGV[1]

-- A full group, known from its marker: refuse without the clock or the records, unless
-- this token holds one of the slots (a retry after a lost reply), asks with another N, or
-- claims the next free slot (which needs the clock and the group's claim).
local marker = ARGV[7] == '' and redis.call('GET', full_key)
if marker then
  if string.sub(marker, 1, #FULL_PREFIX) ~= FULL_PREFIX then
    return redis.error_reply('WRONGTYPE the full marker key holds a value this store did not write')
  end
  local full_for = redis.call('PTTL', full_key)
  if full_for > 0 and string.sub(marker, #FULL_PREFIX + 1) == ARGV[4]
      and not redis.call('HGET', group, token) then
    return {0, full_for}
  end
end
