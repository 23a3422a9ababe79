-- W1 as w1_store, with a release that sends NOTIFY whether or not anybody waits, as the
-- store's did before schema version 5 (leader_release_loud, made by setup.sh).
\set r random(1, 999999999999)
SELECT leader_grant('w1:' || :client_id, '00000000-0000-4000-8000-' || lpad(:r::text, 12, '0'), 'b', 10000, 1, true);
SELECT * FROM leader_release_loud('w1:' || :client_id, '00000000-0000-4000-8000-' || lpad(:r::text, 12, '0'), 0);
