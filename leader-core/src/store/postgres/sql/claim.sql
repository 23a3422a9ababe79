-- claim: a refused acquire's claim on the group's next free slot (fair waiting), made by
-- the statement of an acquire that asks for one (schema/names.rs: the acquire statement,
-- then this on a refusal). The claim goes to this token unless a live one that goes first
-- holds it: the holder an operator prefers (__P__preferences), then a higher priority, then
-- the same priority and an arrival no later (a claim by the same token keeps its earliest
-- arrival); it lives `p_hold_ms` from now.
-- Answers `p_answer`, the acquire's, unless this claim took over one that held back a free
-- slot: then it asks grant again, for the slot the claim now keeps for this token. The
-- claim's holder is told a nearest expiry within half the claim's life, so it asks again
-- (and the claim lives on) while it waits. A claim that would change nothing (another's
-- live one arrived no later, or this token's has most of its time left) is answered from
-- a look without the lock, writing nothing: after a release every waiter asks at once. A
-- row claimed longer than 2^47 ms from now was not written by this store: it counts as
-- none, and this claim replaces it.
CREATE OR REPLACE FUNCTION __S__.__P__claim(
  p_key text, p_token text, p_holder text, p_lease_ms bigint, p_max integer,
  p_waited_ms bigint, p_hold_ms bigint, p_priority integer, p_answer bigint[])
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_by uuid;
  v_arrived timestamptz;
  v_until timestamptz;
  v_priority integer;
  v_holder text;
  v_preferred text;
BEGIN
  SELECT r.token, r.arrived_at, r.held_until, r.priority, r.holder
    INTO v_by, v_arrived, v_until, v_priority, v_holder
    FROM __S__.__P__reservations AS r
    WHERE r.key = p_key AND r.held_until <= v_now + interval '140737488355 seconds';
  IF v_until > v_now AND v_by = p_token::uuid
     AND v_until > v_now + p_hold_ms * interval '750 microseconds' THEN
    RETURN __S__.__P__sooner(p_answer, p_hold_ms);
  END IF;
  IF v_until > v_now AND v_by <> p_token::uuid THEN
    v_preferred := __S__.__P__preferred(p_key);
  END IF;
  IF v_until > v_now AND v_by <> p_token::uuid
     AND (CASE WHEN (v_holder = v_preferred) IS DISTINCT FROM (p_holder = v_preferred)
               THEN v_holder = v_preferred
               ELSE v_priority > p_priority OR (v_priority = p_priority
                    AND v_arrived <= v_now - p_waited_ms * interval '1 millisecond') END) THEN
    RETURN __S__.__P__until_lapsed(p_answer, v_until);
  END IF;
  PERFORM pg_advisory_xact_lock(__S__.__P__lock_key(p_key));
  v_now := clock_timestamp();
  v_preferred := __S__.__P__preferred(p_key);
  INSERT INTO __S__.__P__reservations AS r (key, token, arrived_at, held_until, priority, holder)
    VALUES (p_key, p_token::uuid, v_now - p_waited_ms * interval '1 millisecond',
            v_now + p_hold_ms * interval '1 millisecond', p_priority, p_holder)
  ON CONFLICT (key) DO UPDATE
    SET token = excluded.token,
        arrived_at = CASE WHEN r.token = excluded.token AND r.held_until > v_now
                          THEN least(r.arrived_at, excluded.arrived_at)
                          ELSE excluded.arrived_at END,
        held_until = excluded.held_until,
        priority = excluded.priority,
        holder = excluded.holder
    WHERE r.held_until <= v_now OR r.token = excluded.token
       OR r.held_until > v_now + interval '140737488355 seconds'
       OR CASE WHEN (r.holder = v_preferred) IS DISTINCT FROM (excluded.holder = v_preferred)
               THEN excluded.holder = v_preferred
               ELSE r.priority < excluded.priority
                    OR (r.priority = excluded.priority AND r.arrived_at > excluded.arrived_at)
               END;
  IF NOT FOUND THEN
    SELECT r.held_until INTO v_until FROM __S__.__P__reservations AS r
      WHERE r.key = p_key AND r.held_until <= v_now + interval '140737488355 seconds';
    RETURN __S__.__P__until_lapsed(p_answer, v_until);
  END IF;
  IF (SELECT count(*) FROM __S__.__P__slots AS s
      WHERE s.key = p_key AND s.expires_at > v_now) < p_max THEN
    RETURN __S__.__P__grant(p_key, p_token, p_holder, p_lease_ms, p_max, false);
  END IF;
  RETURN __S__.__P__sooner(p_answer, p_hold_ms);
END $$;

-- A refusal `p_answer` ([0, _, _, expires_us, now_us, _]) whose nearest expiry is at most
-- half of `p_hold_ms` away: the answer to a claim's holder.
CREATE OR REPLACE FUNCTION __S__.__P__sooner(p_answer bigint[], p_hold_ms bigint)
RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_answer[1:3] || least(p_answer[4], p_answer[5] + p_hold_ms * 500) || p_answer[5:6]
$$;

-- A refusal `p_answer` whose nearest expiry is no later than `p_until`, the end of the
-- claim that went before this one's: a better candidate behind a claim whose holder died
-- asks again, and announces itself, once that claim lapsed.
CREATE OR REPLACE FUNCTION __S__.__P__until_lapsed(p_answer bigint[], p_until timestamptz)
RETURNS bigint[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT p_answer[1:3]
         || least(p_answer[4], coalesce(__S__.__P__micros(p_until), p_answer[4]))
         || p_answer[5:6]
$$;

-- claim_info: the group's live claim, for a leader that looks for a better candidate and
-- for tools: its holder, priority, ms waited and ms left; no row when none lives (nor for
-- a row this store did not write: an end beyond its range, an infinite arrival).
CREATE OR REPLACE FUNCTION __S__.__P__claim_info(p_key text)
RETURNS TABLE (holder text, priority integer, waited_ms bigint, expires_in_ms bigint)
LANGUAGE sql STABLE AS $$
  SELECT r.holder, r.priority,
         greatest(0, floor(extract(epoch FROM clock_timestamp() - r.arrived_at) * 1000))::bigint,
         ceil(extract(epoch FROM r.held_until - clock_timestamp()) * 1000)::bigint
    FROM __S__.__P__reservations AS r
    WHERE r.key = p_key AND r.held_until > clock_timestamp()
      AND r.held_until <= clock_timestamp() + interval '140737488355 seconds'
      AND isfinite(r.arrived_at)
$$;

-- preferred: the holder an operator prefers for group `p_key`, while the preference lives
-- (NULL for none, and for a row this store did not write: an end beyond its range, an
-- empty holder).
CREATE OR REPLACE FUNCTION __S__.__P__preferred(p_key text)
RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT p.holder FROM __S__.__P__preferences AS p
    WHERE p.key = p_key AND p.holder <> '' AND p.held_until > clock_timestamp()
      AND p.held_until <= clock_timestamp() + interval '140737488355 seconds'
$$;
