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

