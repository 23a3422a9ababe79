-- The PostgreSQL store's schema: two tables and four functions, one per operation, so each
-- operation is one statement (one round trip). `__S__` is the schema and `__P__` the prefix
-- of every name, both quoted identifiers put in by the store.
--
-- A group is one row of __P__groups (its max_leaders and last fence), locked FOR UPDATE by
-- every write, so at most max_leaders live slots exist under any concurrency. A slot is one
-- row of __P__slots. Time is the server's clock_timestamp(), taken after the lock; every
-- time goes back to the client in microseconds since the Unix epoch.

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

-- Functions of an earlier schema version go first (a changed result type cannot be
-- replaced in place); this runs only when the version differs, in one transaction.
DROP FUNCTION IF EXISTS __S__.__P__acquire(text, text, text, bigint, integer);
DROP FUNCTION IF EXISTS __S__.__P__renew(text, text, bigint);
DROP FUNCTION IF EXISTS __S__.__P__release(text, text, bigint);
DROP FUNCTION IF EXISTS __S__.__P__state(text);

CREATE OR REPLACE FUNCTION __S__.__P__micros(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

-- acquire: outcome 1 granted (new, or already held by the token), 0 full (nearest expiry),
-- 2 live slots granted under another max_leaders (existing_max).
CREATE OR REPLACE FUNCTION __S__.__P__acquire(
  p_key text, p_token text, p_holder text, p_lease_ms bigint, p_max integer,
  OUT outcome integer, OUT fence bigint, OUT acquired_us bigint, OUT expires_us bigint,
  OUT now_us bigint, OUT existing_max integer)
LANGUAGE plpgsql AS $$
DECLARE
  v_token uuid := p_token::uuid;
  v_group __S__.__P__groups%ROWTYPE;
  v_slot __S__.__P__slots%ROWTYPE;
  v_now timestamptz;
  v_live integer;
  v_nearest timestamptz;
  v_fence bigint;
  v_mine boolean;
  v_max integer;
BEGIN
  -- A full group, seen in a snapshot: refused without a lock or a write, unless this token
  -- holds one of the slots (a retry after a lost reply) or asks with another N. It only
  -- ever refuses; a grant always takes the lock below.
  v_now := clock_timestamp();
  SELECT count(*), min(s.expires_at), coalesce(bool_or(s.token = v_token), false)
    INTO v_live, v_nearest, v_mine
    FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.expires_at > v_now;
  IF v_live >= p_max AND NOT v_mine THEN
    SELECT g.max_leaders INTO v_max FROM __S__.__P__groups AS g WHERE g.key = p_key;
    IF v_max = p_max THEN
      SELECT 0, NULL::bigint, NULL::bigint, __S__.__P__micros(v_nearest), __S__.__P__micros(v_now), NULL::integer INTO outcome, fence, acquired_us, expires_us, now_us, existing_max;
      RETURN;
    END IF;
  END IF;
  INSERT INTO __S__.__P__groups AS g (key, max_leaders, last_fence) VALUES (p_key, p_max, 0)
    ON CONFLICT (key) DO NOTHING;
  SELECT * INTO v_group FROM __S__.__P__groups AS g WHERE g.key = p_key FOR UPDATE;
  v_now := clock_timestamp();
  DELETE FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.expires_at <= v_now;
  SELECT * INTO v_slot FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.token = v_token;
  IF FOUND THEN
    SELECT 1, v_slot.fence, __S__.__P__micros(v_slot.acquired_at), __S__.__P__micros(v_slot.expires_at), __S__.__P__micros(v_now), NULL::integer INTO outcome, fence, acquired_us, expires_us, now_us, existing_max;
    RETURN;
  END IF;
  SELECT count(*), min(s.expires_at) INTO v_live, v_nearest
    FROM __S__.__P__slots AS s WHERE s.key = p_key;
  IF v_live > 0 AND v_group.max_leaders <> p_max THEN
    SELECT 2, NULL::bigint, NULL::bigint, NULL::bigint, __S__.__P__micros(v_now), v_group.max_leaders INTO outcome, fence, acquired_us, expires_us, now_us, existing_max;
    RETURN;
  END IF;
  IF v_live >= p_max THEN
    SELECT 0, NULL::bigint, NULL::bigint, __S__.__P__micros(v_nearest), __S__.__P__micros(v_now), NULL::integer INTO outcome, fence, acquired_us, expires_us, now_us, existing_max;
    RETURN;
  END IF;
  -- Strictly above every earlier fence, and above the clock in microseconds, so fences
  -- keep increasing even if the group's row were lost.
  v_fence := greatest(v_group.last_fence + 1, __S__.__P__micros(v_now));
  UPDATE __S__.__P__groups AS g SET max_leaders = p_max, last_fence = v_fence
    WHERE g.key = p_key;
  INSERT INTO __S__.__P__slots (key, token, holder, fence, acquired_at, expires_at)
    VALUES (p_key, v_token, p_holder, v_fence, v_now,
            v_now + p_lease_ms * interval '1 millisecond');
  SELECT 1, v_fence, __S__.__P__micros(v_now), __S__.__P__micros(v_now + p_lease_ms * interval '1 millisecond'), __S__.__P__micros(v_now), NULL::integer INTO outcome, fence, acquired_us, expires_us, now_us, existing_max;
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
  PERFORM 1 FROM __S__.__P__groups AS g WHERE g.key = p_key FOR UPDATE;
  v_now := clock_timestamp();
  SELECT s.expires_at INTO v_old FROM __S__.__P__slots AS s
    WHERE s.key = p_key AND s.token = v_token AND s.expires_at > v_now;
  IF NOT FOUND THEN
    SELECT 0, NULL::bigint, __S__.__P__micros(v_now) INTO outcome, expires_us, now_us;
    RETURN;
  END IF;
  v_new := v_now + p_lease_ms * interval '1 millisecond';
  UPDATE __S__.__P__slots AS s SET expires_at = v_new WHERE s.key = p_key AND s.token = v_token;
  IF v_new < v_old THEN
    PERFORM pg_notify('__C__', p_key);
  END IF;
  SELECT 1, __S__.__P__micros(v_new), __S__.__P__micros(v_now) INTO outcome, expires_us, now_us;
END $$;

-- release: outcome 1 released, 2 kept until the minimum lease ends (expires_in_us), 0 not
-- held. Wakes the group's waiters (NOTIFY, sent at commit) when it frees or shortens a slot.
CREATE OR REPLACE FUNCTION __S__.__P__release(p_key text, p_token text, p_min_lease_ms bigint,
  OUT outcome integer, OUT expires_in_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_token uuid := p_token::uuid;
  v_now timestamptz;
  v_slot __S__.__P__slots%ROWTYPE;
  v_keep timestamptz;
BEGIN
  PERFORM 1 FROM __S__.__P__groups AS g WHERE g.key = p_key FOR UPDATE;
  v_now := clock_timestamp();
  SELECT * INTO v_slot FROM __S__.__P__slots AS s
    WHERE s.key = p_key AND s.token = v_token AND s.expires_at > v_now;
  IF NOT FOUND THEN
    SELECT 0, NULL::bigint INTO outcome, expires_in_us;
    RETURN;
  END IF;
  v_keep := v_slot.acquired_at + p_min_lease_ms * interval '1 millisecond';
  IF v_keep > v_now THEN
    v_keep := least(v_keep, v_slot.expires_at);
    UPDATE __S__.__P__slots AS s SET expires_at = v_keep WHERE s.key = p_key AND s.token = v_token;
    PERFORM pg_notify('__C__', p_key);
    SELECT 2, __S__.__P__micros(v_keep) - __S__.__P__micros(v_now) INTO outcome, expires_in_us;
    RETURN;
  END IF;
  DELETE FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.token = v_token;
  PERFORM pg_notify('__C__', p_key);
  SELECT 1, NULL::bigint INTO outcome, expires_in_us;
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
COMMENT ON FUNCTION __S__.__P__acquire(text, text, text, bigint, integer) IS '__V__';
