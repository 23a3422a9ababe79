-- A refusal alone: the lease row's UPDATE that matches nothing.
UPDATE bench_leases SET holder = 'b', expires_at = clock_timestamp() + interval '10 s'
 WHERE key = 'pg-held' AND expires_at <= clock_timestamp();
