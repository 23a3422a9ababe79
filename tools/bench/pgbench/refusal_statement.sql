-- A refusal alone, by the store's acquire statement (sql/acquire.sql): the look in plain SQL
-- answers it; leader_grant would run only if a slot looked free.
SELECT CASE
  WHEN coalesce(bool_or(s.token = '6f1c6a4e-2f9b-4a47-9d61-0b3f6a1b2c3d'::uuid), false)
    THEN leader_grant('pg-held', '6f1c6a4e-2f9b-4a47-9d61-0b3f6a1b2c3d', 'b', 10000, 1, true)
  WHEN count(s.key) > 0 AND min(g.max_leaders) <> 1
    THEN ARRAY[2, NULL, NULL, NULL, leader_micros(clock_timestamp()), min(g.max_leaders)]
  WHEN count(s.key) >= 1
    THEN ARRAY[0, NULL, NULL, leader_micros(min(s.expires_at)), leader_micros(clock_timestamp()), NULL]
  ELSE leader_grant('pg-held', '6f1c6a4e-2f9b-4a47-9d61-0b3f6a1b2c3d', 'b', 10000, 1, true)
END
FROM (SELECT) AS one
LEFT JOIN leader_groups AS g ON g.key = 'pg-held'
LEFT JOIN leader_slots AS s ON s.key = 'pg-held' AND s.expires_at > clock_timestamp();
