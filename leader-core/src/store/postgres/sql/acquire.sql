-- acquire: the statement the store sends for every attempt (one round trip). A full group
-- (or one under another max_leaders) is answered in plain SQL from the statement's snapshot,
-- writing nothing; the grant function (grant.sql) runs only when a slot looks free or the
-- token already holds one. The statement only routes: every grant is made by grant, which
-- looks again under the group's lock. (A refusal is the commonest answer under contention,
-- and a plpgsql call costs about as much again as the look itself.)
-- $1 key, $2 token, $3 holder, $4 lease_ms, $5 max_leaders
-- One column, grant's array: [outcome, fence, acquired_us, expires_us, now_us, existing_max].
SELECT CASE
  WHEN coalesce(bool_or(s.token = $2::text::uuid), false)
    THEN __S__.__P__grant($1::text, $2::text, $3::text, $4::bigint, $5::integer, true)
  WHEN count(s.key) > 0 AND min(g.max_leaders) <> $5::integer
    THEN ARRAY[2, NULL, NULL, NULL, __S__.__P__micros(clock_timestamp()), min(g.max_leaders)]
  WHEN count(s.key) >= $5::integer
    THEN ARRAY[0, NULL, NULL, __S__.__P__micros(min(s.expires_at)), __S__.__P__micros(clock_timestamp()), NULL]
  ELSE __S__.__P__grant($1::text, $2::text, $3::text, $4::bigint, $5::integer, true)
END
FROM (SELECT) AS one
LEFT JOIN __S__.__P__groups AS g ON g.key = $1::text
LEFT JOIN __S__.__P__slots AS s ON s.key = $1::text AND s.expires_at > clock_timestamp()
