-- state: the live slots (none: no rows), read without locking or writing, so it also
-- answers on a hot standby.
CREATE OR REPLACE FUNCTION __S__.__P__state(p_key text)
RETURNS TABLE (max_leaders integer, holder text, fence bigint, acquired_us bigint,
               expires_us bigint, now_us bigint)
LANGUAGE sql STABLE AS $$
  SELECT g.max_leaders, s.holder, s.fence, __S__.__P__micros(s.acquired_at),
         __S__.__P__micros(s.expires_at), __S__.__P__micros(clock_timestamp())
  FROM __S__.__P__slots AS s JOIN __S__.__P__groups AS g ON g.key = s.key
  WHERE s.key = p_key AND s.expires_at > clock_timestamp()
  ORDER BY s.fence
$$;
