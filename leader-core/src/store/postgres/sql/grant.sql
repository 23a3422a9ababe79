-- grant: the acquire operation, answered as an array (a scalar, so the caller's statement
-- needs no function scan): [outcome, fence, acquired_us, expires_us, now_us, existing_max],
-- outcome 1 granted (new, or already held by the token), 0 full (expires_us: the nearest
-- expiry), 2 live slots granted under another max_leaders (existing_max). A new grant
-- notifies the group's observers, if some store announced any (see observe_key).
CREATE OR REPLACE FUNCTION __S__.__P__grant(
  p_key text, p_token text, p_holder text, p_lease_ms bigint, p_max integer, p_looked boolean)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
  v_token uuid := p_token::uuid;
  v_now timestamptz;
  v_live integer;
  v_expired integer;
  v_nearest timestamptz;
  v_max integer;
  v_last bigint;
  v_fence bigint;
  v_my_fence bigint;
  v_my_acquired timestamptz;
  v_my_expires timestamptz;
  v_claimed_by uuid;
  v_claimed_until timestamptz;
BEGIN
  -- Look at the group twice: from a snapshot without any lock (unless the caller's
  -- statement just did: p_looked), then, unless that answered, under the group's advisory
  -- lock (once its writer in flight, if any, has finished). A full group or another
  -- max_leaders is answered from either look and writes nothing.
  FOR v_look IN CASE WHEN p_looked THEN 2 ELSE 1 END..2 LOOP
    IF v_look = 2 THEN
      PERFORM pg_advisory_xact_lock(__S__.__P__lock_key(p_key));
    END IF;
    v_now := clock_timestamp();
    SELECT count(*) FILTER (WHERE s.expires_at > v_now),
           min(s.expires_at) FILTER (WHERE s.expires_at > v_now),
           count(*) FILTER (WHERE s.expires_at <= v_now),
           max(s.fence) FILTER (WHERE s.token = v_token AND s.expires_at > v_now),
           max(s.acquired_at) FILTER (WHERE s.token = v_token AND s.expires_at > v_now),
           max(s.expires_at) FILTER (WHERE s.token = v_token AND s.expires_at > v_now),
           (SELECT g.max_leaders FROM __S__.__P__groups AS g WHERE g.key = p_key),
           (SELECT g.last_fence FROM __S__.__P__groups AS g WHERE g.key = p_key)
      INTO v_live, v_nearest, v_expired, v_my_fence, v_my_acquired, v_my_expires, v_max, v_last
      FROM __S__.__P__slots AS s WHERE s.key = p_key;
    -- A slot of this token (a retry after a lost reply) is answered under the lock only.
    IF v_my_fence IS NULL AND v_live > 0 AND v_max <> p_max THEN
      RETURN ARRAY[2, NULL, NULL, NULL, __S__.__P__micros(v_now), v_max];
    END IF;
    IF v_my_fence IS NULL AND v_live >= p_max THEN
      RETURN ARRAY[0, NULL, NULL, __S__.__P__micros(v_nearest), __S__.__P__micros(v_now), NULL];
    END IF;
    -- A slot is free. The group's last one is kept for the token a live claim names
    -- (claim.sql): another's request is refused from either look, with the claim's end.
    -- (A row claimed longer than 2^47 ms from now, the store's duration range, was not
    -- written by this store: it counts as none, and the next claim replaces it.)
    SELECT r.token, r.held_until INTO v_claimed_by, v_claimed_until
      FROM __S__.__P__reservations AS r
      WHERE r.key = p_key AND r.held_until <= v_now + interval '140737488355 seconds';
    IF v_my_fence IS NULL AND v_claimed_until > v_now AND v_claimed_by <> v_token
       AND p_max - v_live = 1 THEN
      RETURN ARRAY[0, NULL, NULL, __S__.__P__micros(v_claimed_until), __S__.__P__micros(v_now), NULL];
    END IF;
  END LOOP;
  IF v_my_fence IS NOT NULL THEN
    RETURN ARRAY[1, v_my_fence, __S__.__P__micros(v_my_acquired),
                 __S__.__P__micros(v_my_expires), __S__.__P__micros(v_now), NULL];
  END IF;
  -- A grant to the claim's token ends the claim, and a lapsed claim goes.
  IF v_claimed_until <= v_now OR v_claimed_by = v_token THEN
    DELETE FROM __S__.__P__reservations AS r WHERE r.key = p_key;
  END IF;
  -- Grant it. Strictly above every earlier fence, and above the clock in
  -- microseconds, so fences keep increasing even if the group's row were lost.
  IF v_expired > 0 THEN
    DELETE FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.expires_at <= v_now;
  END IF;
  v_fence := greatest(coalesce(v_last, 0) + 1, __S__.__P__micros(v_now));
  -- The group's fence moves only if no grant was made since the look (one the look could
  -- not see: made without this lock, by hand, or committed after a REPEATABLE READ
  -- session's snapshot was taken).
  IF v_last IS NULL THEN
    INSERT INTO __S__.__P__groups AS g (key, max_leaders, last_fence)
      VALUES (p_key, p_max, v_fence) ON CONFLICT (key) DO NOTHING;
  ELSE
    UPDATE __S__.__P__groups AS g SET max_leaders = p_max, last_fence = v_fence
      WHERE g.key = p_key AND g.last_fence = v_last;
  END IF;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'group % was granted concurrently, unseen by this look (a grant without its advisory lock, or after this snapshot); try again', p_key
      USING ERRCODE = 'serialization_failure';
  END IF;
  INSERT INTO __S__.__P__slots (key, token, holder, fence, acquired_at, expires_at)
    VALUES (p_key, v_token, p_holder, v_fence, v_now,
            v_now + p_lease_ms * interval '1 millisecond');
  -- Observers learn of the grant at commit; nobody else is told.
  IF NOT pg_try_advisory_xact_lock(__S__.__P__observe_key(p_key)) THEN
    PERFORM pg_notify('__C__', 'granted ' || p_key);
  END IF;
  RETURN ARRAY[1, v_fence, __S__.__P__micros(v_now),
               __S__.__P__micros(v_now + p_lease_ms * interval '1 millisecond'),
               __S__.__P__micros(v_now), NULL];
END $$;

-- What a store checks before it writes anything: present and of this version, the schema
-- needs no migration (so a store on a read-only standby starts without writing).
COMMENT ON FUNCTION __S__.__P__grant(text, text, text, bigint, integer, boolean) IS '__V__';
