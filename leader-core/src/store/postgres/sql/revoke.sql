-- revoke: end a slot for a caller that was not granted it (an operator's tool, another
-- service), named by its token or, when p_token is null, by its fence. With p_now false the
-- slot moves to p_nobody, a token nobody holds: its holder's renewals and release find
-- nothing from now on, and it lapses at its expiry (outcome 2, expires_in_us), when the
-- holder's deadline has passed. With p_now true it is deleted at once, as a release (outcome
-- 1), and the group's waiters are woken. Outcome 0: no such live slot.
CREATE OR REPLACE FUNCTION __S__.__P__revoke(p_key text, p_token text, p_fence bigint,
  p_now boolean, p_nobody text, OUT outcome integer, OUT expires_in_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_token uuid;
  v_expires timestamptz;
BEGIN
  IF current_setting('transaction_read_only') = 'on' THEN
    RAISE EXCEPTION 'cannot revoke a slot on a read-only server'
      USING ERRCODE = 'read_only_sql_transaction';
  END IF;
  PERFORM pg_advisory_xact_lock(__S__.__P__lock_key(p_key));
  v_now := clock_timestamp();
  DELETE FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.expires_at <= v_now;
  SELECT s.token, s.expires_at INTO v_token, v_expires FROM __S__.__P__slots AS s
    WHERE s.key = p_key AND s.expires_at > v_now
      AND (s.token = p_token::uuid OR (p_token IS NULL AND s.fence = p_fence));
  IF NOT FOUND THEN
    outcome := 0;
    RETURN;
  END IF;
  IF p_now THEN
    DELETE FROM __S__.__P__slots AS s WHERE s.key = p_key AND s.token = v_token;
    IF NOT pg_try_advisory_xact_lock(__S__.__P__wait_key(p_key)) THEN
      PERFORM pg_notify('__C__', p_key);
    END IF;
    outcome := 1;
    RETURN;
  END IF;
  UPDATE __S__.__P__slots AS s SET token = p_nobody::uuid
    WHERE s.key = p_key AND s.token = v_token;
  outcome := 2;
  expires_in_us := __S__.__P__micros(v_expires) - __S__.__P__micros(v_now);
END $$;
