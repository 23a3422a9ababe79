-- A refusal alone, decided in plain SQL in the client's statement; the function runs only
-- when a slot looks free (a one-time filter), which it never does here.
WITH seen AS MATERIALIZED (
  SELECT 0 AS outcome, NULL::bigint AS fence, NULL::bigint AS acquired_us,
         leader_micros(min(s.expires_at)) AS expires_us, leader_micros(clock_timestamp()) AS now_us,
         NULL::integer AS existing_max
    FROM leader_slots AS s WHERE s.key = 'pg-held' AND s.expires_at > clock_timestamp()
  HAVING count(*) >= 1 AND NOT coalesce(bool_or(s.token = '6f1c6a4e-2f9b-4a47-9d61-0b3f6a1b2c3d'), false)
     AND (SELECT g.max_leaders FROM leader_groups AS g WHERE g.key = 'pg-held') = 1)
SELECT * FROM seen
UNION ALL
SELECT * FROM leader_acquire('pg-held', '6f1c6a4e-2f9b-4a47-9d61-0b3f6a1b2c3d', 'b', 10000, 1)
 WHERE NOT EXISTS (SELECT FROM seen);
