-- W2 with the lease row.
WITH taken AS (
  UPDATE bench_leases SET holder = :client_id, expires_at = clock_timestamp() + interval '10 s'
   WHERE key = 'pg-w2' AND expires_at <= clock_timestamp() RETURNING 1)
SELECT count(*) AS won FROM taken \gset
\if :won = 1
UPDATE bench_leases SET expires_at = clock_timestamp() WHERE key = 'pg-w2' AND holder = :client_id::text;
\endif
