-- W1 as w1_store, with a release that sends no NOTIFY (leader_release_quiet, made by
-- setup.sh): what the NOTIFY on every release costs when nobody waits.
\set r random(1, 999999999999)
SELECT leader_grant('w1:' || :client_id, '00000000-0000-4000-8000-' || lpad(:r::text, 12, '0'), 'b', 10000, 1, true);
SELECT * FROM leader_release_quiet('w1:' || :client_id, '00000000-0000-4000-8000-' || lpad(:r::text, 12, '0'), 0);
