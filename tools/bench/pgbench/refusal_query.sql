-- A refusal alone: only a counting query like the look the statement and the function run.
SELECT count(*) FILTER (WHERE s.expires_at > clock_timestamp()), min(s.expires_at),
       (SELECT g.max_leaders FROM leader_groups AS g WHERE g.key = 'pg-held')
  FROM leader_slots AS s WHERE s.key = 'pg-held';
