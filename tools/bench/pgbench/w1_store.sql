-- W1: each client cycles grant + release on a group of its own (no contention), with the
-- store's functions (the grant as the acquire statement calls it once a slot looks free).
\set r random(1, 999999999999)
SELECT leader_grant('w1:' || :client_id, '00000000-0000-4000-8000-' || lpad(:r::text, 12, '0'), 'b', 10000, 1, true);
SELECT * FROM leader_release('w1:' || :client_id, '00000000-0000-4000-8000-' || lpad(:r::text, 12, '0'), 0);
