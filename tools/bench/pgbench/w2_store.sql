-- W2: try the group with the store's acquire statement (sql/acquire.sql), give it back at once
-- if granted.
\set r random(1, 999999999999)
SELECT (CASE
  WHEN coalesce(bool_or(s.token = x.t::uuid), false)
    THEN leader_grant('pg-w2', x.t, 'b', 10000, 1, true)
  WHEN count(s.key) > 0 AND min(g.max_leaders) <> 1
    THEN ARRAY[2, NULL, NULL, NULL, leader_micros(clock_timestamp()), min(g.max_leaders)]
  WHEN count(s.key) >= 1
    THEN ARRAY[0, NULL, NULL, leader_micros(min(s.expires_at)), leader_micros(clock_timestamp()), NULL]
  ELSE leader_grant('pg-w2', x.t, 'b', 10000, 1, true)
END)[1] AS won, x.t AS tok
FROM (SELECT '00000000-0000-4000-8000-' || lpad(:r::text, 12, '0') AS t) AS x
LEFT JOIN leader_groups AS g ON g.key = 'pg-w2'
LEFT JOIN leader_slots AS s ON s.key = 'pg-w2' AND s.expires_at > clock_timestamp()
GROUP BY x.t \gset
\if :won = 1
SELECT * FROM leader_release('pg-w2', :tok, 0);
\endif
