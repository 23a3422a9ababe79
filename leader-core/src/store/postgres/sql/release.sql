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

