-- A refusal alone: only the counting query the function runs first.
SELECT count(*) FILTER (WHERE s.expires_at > clock_timestamp()), min(s.expires_at),
       (SELECT g.max_leaders FROM leader_groups AS g WHERE g.key = 'pg-held')
  FROM leader_slots AS s WHERE s.key = 'pg-held';
