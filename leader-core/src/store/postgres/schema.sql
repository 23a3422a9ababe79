-- The PostgreSQL store's schema: two tables and four functions, one per operation, so each
-- operation is one statement (one round trip). `__S__` is the schema and `__P__` the prefix
-- of every name, both plain identifiers put in by the store.
--
-- A group is one row of __P__groups (its max_leaders and last fence) and a slot one row of
-- __P__slots. Time is the server's clock_timestamp(); every time goes back to the client in
-- microseconds since the Unix epoch. The store's acquire statement (in schema.rs) answers a
-- full group in plain SQL and calls grant only when a slot looks free: most attempts on a
-- contended group are refused, and a plpgsql call costs about as much again as the look.
--
-- Concurrency. Every write to a group is made under the group's transaction-scoped
-- advisory lock (__P__lock_key(key), 64 bits), so its writers take turns; readers never
-- wait. An acquire looks at the group from a snapshot first, and only if a slot looked free
-- takes the lock and looks again, so a refusal writes nothing (no row lock, no transaction
-- id, no WAL). A grant moves the group's fence only from the value its look saw: a grant
-- made in between without the lock (by hand) or unseen by a REPEATABLE READ snapshot makes
-- it a serialization failure, which the store retries, never a slot too many.

CREATE TABLE IF NOT EXISTS __S__.__P__groups (
  key text PRIMARY KEY,
  max_leaders integer NOT NULL,
  last_fence bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS __S__.__P__slots (
  key text NOT NULL,
  token uuid NOT NULL,
  holder text NOT NULL,
  fence bigint NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (key, token)
);

-- The functions of an older schema version go first (a changed result type cannot be
-- replaced in place); this runs only when the version is older, in one transaction.
DROP FUNCTION IF EXISTS __S__.__P__acquire(text, text, text, bigint, integer);
DROP FUNCTION IF EXISTS __S__.__P__grant(text, text, text, bigint, integer, boolean);
DROP FUNCTION IF EXISTS __S__.__P__renew(text, text, bigint);
DROP FUNCTION IF EXISTS __S__.__P__release(text, text, bigint);
DROP FUNCTION IF EXISTS __S__.__P__state(text);
DROP FUNCTION IF EXISTS __S__.__P__lock_class();
DROP FUNCTION IF EXISTS __S__.__P__wait_class();

CREATE OR REPLACE FUNCTION __S__.__P__micros(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;
-- (STABLE, as extract on a timestamptz is: so the planner inlines it into each caller.)

-- The key of a group's advisory lock: 64 bits (hashtextextended), so two groups share a
-- lock only by a 64-bit collision (32-bit hashtext collides for names as plain as
-- 'leader:job-28633' and 'leader:job-42639', and two unrelated groups then wait on each
-- other). Seeded per store, so the tables of two stores never share one either.
CREATE OR REPLACE FUNCTION __S__.__P__lock_key(p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT hashtextextended(p_key, hashtext('leader-core __S__.__P__groups'))
$$;

-- The key of the advisory lock that says someone waits for a group's releases: a store's
-- LISTEN connection holds it in shared mode for every group it has waiters of. A release
-- (or a shortening renewal) sends NOTIFY only when it cannot take that lock exclusively:
-- PostgreSQL serialises every committing transaction that sent a NOTIFY, across the
-- cluster, through its WAL flush, so one sent when nobody waits costs every other release.
-- (A waiter announcing itself while a release holds the lock waits for that release's
-- commit, then finds its slot free.)
CREATE OR REPLACE FUNCTION __S__.__P__wait_key(p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT hashtextextended(p_key, hashtext('leader-core waiting __S__.__P__groups'))
$$;

-- grant: the acquire operation, answered as an array (a scalar, so the caller's statement
-- needs no function scan): [outcome, fence, acquired_us, expires_us, now_us, existing_max],
-- outcome 1 granted (new, or already held by the token), 0 full (expires_us: the nearest
-- expiry), 2 live slots granted under another max_leaders (existing_max).
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
  END LOOP;
  IF v_my_fence IS NOT NULL THEN
    RETURN ARRAY[1, v_my_fence, __S__.__P__micros(v_my_acquired),
                 __S__.__P__micros(v_my_expires), __S__.__P__micros(v_now), NULL];
  END IF;
  -- A slot is free: grant it. Strictly above every earlier fence, and above the clock in
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
  RETURN ARRAY[1, v_fence, __S__.__P__micros(v_now),
               __S__.__P__micros(v_now + p_lease_ms * interval '1 millisecond'),
               __S__.__P__micros(v_now), NULL];
END $$;

-- renew: outcome 1 renewed (new expiry), 0 not held. Never revives an expired slot.
CREATE OR REPLACE FUNCTION __S__.__P__renew(p_key text, p_token text, p_lease_ms bigint,
  OUT outcome integer, OUT expires_us bigint, OUT now_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_token uuid := p_token::uuid;
  v_now timestamptz;
  v_old timestamptz;
  v_new timestamptz;
BEGIN
  -- A read-only server (a hot standby) may lag behind the primary: its "not held" would
  -- be no answer, so it gives none.
  IF current_setting('transaction_read_only') = 'on' THEN
    RAISE EXCEPTION 'cannot renew a slot on a read-only server'
      USING ERRCODE = 'read_only_sql_transaction';
  END IF;
  PERFORM pg_advisory_xact_lock(__S__.__P__lock_key(p_key));
  v_now := clock_timestamp();
  -- Every write takes the group's expired slots with it, so a group nobody uses any more
  -- keeps only its row (its max_leaders and last fence), whichever write was its last.
  DELETE FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.expires_at <= v_now;
  SELECT s.expires_at INTO v_old FROM __S__.__P__slots AS s
    WHERE s.key = p_key AND s.token = v_token AND s.expires_at > v_now;
  IF NOT FOUND THEN
    outcome := 0;
    now_us := __S__.__P__micros(v_now);
    RETURN;
  END IF;
  v_new := v_now + p_lease_ms * interval '1 millisecond';
  UPDATE __S__.__P__slots AS s SET expires_at = v_new WHERE s.key = p_key AND s.token = v_token;
  IF v_new < v_old THEN
    IF NOT pg_try_advisory_xact_lock(__S__.__P__wait_key(p_key)) THEN
      PERFORM pg_notify('__C__', p_key);
    END IF;
  END IF;
  outcome := 1;
  expires_us := __S__.__P__micros(v_new);
  now_us := __S__.__P__micros(v_now);
END $$;

-- release: outcome 1 released, 2 kept until the minimum lease ends (expires_in_us), 0 not
-- held. Wakes the group's waiters (NOTIFY, sent at commit) when it frees or shortens a slot
-- and some store announced waiters of the group (see wait_key).
CREATE OR REPLACE FUNCTION __S__.__P__release(p_key text, p_token text, p_min_lease_ms bigint,
  OUT outcome integer, OUT expires_in_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_token uuid := p_token::uuid;
  v_now timestamptz;
  v_keep timestamptz;
BEGIN
  -- A read-only server (a hot standby) may lag behind the primary: its "not held" would
  -- be no answer, so it gives none.
  IF current_setting('transaction_read_only') = 'on' THEN
    RAISE EXCEPTION 'cannot release a slot on a read-only server'
      USING ERRCODE = 'read_only_sql_transaction';
  END IF;
  PERFORM pg_advisory_xact_lock(__S__.__P__lock_key(p_key));
  v_now := clock_timestamp();
  -- Every write takes the group's expired slots with it, so a group nobody uses any more
  -- keeps only its row (its max_leaders and last fence), whichever write was its last.
  DELETE FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.expires_at <= v_now;
  -- Past its minimum lease (the usual case): deleted at once.
  DELETE FROM __S__.__P__slots AS s
    WHERE s.key = p_key AND s.token = v_token AND s.expires_at > v_now
      AND s.acquired_at + p_min_lease_ms * interval '1 millisecond' <= v_now;
  IF FOUND THEN
    IF NOT pg_try_advisory_xact_lock(__S__.__P__wait_key(p_key)) THEN
      PERFORM pg_notify('__C__', p_key);
    END IF;
    outcome := 1;
    RETURN;
  END IF;
  -- Held but within its minimum lease: kept until that ends (never extended).
  UPDATE __S__.__P__slots AS s
    SET expires_at = least(s.acquired_at + p_min_lease_ms * interval '1 millisecond', s.expires_at)
    WHERE s.key = p_key AND s.token = v_token AND s.expires_at > v_now
    RETURNING s.expires_at INTO v_keep;
  IF NOT FOUND THEN
    outcome := 0;
    RETURN;
  END IF;
  IF NOT pg_try_advisory_xact_lock(__S__.__P__wait_key(p_key)) THEN
    PERFORM pg_notify('__C__', p_key);
  END IF;
  outcome := 2;
  expires_in_us := __S__.__P__micros(v_keep) - __S__.__P__micros(v_now);
END $$;

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

-- What a store checks before it writes anything: present and of this version, the schema
-- needs no migration (so a store on a read-only standby starts without writing).
COMMENT ON FUNCTION __S__.__P__grant(text, text, text, bigint, integer, boolean) IS '__V__';
