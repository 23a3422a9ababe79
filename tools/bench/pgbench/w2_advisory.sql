-- W2 with the advisory-lock idiom.
SELECT pg_try_advisory_lock(42)::int AS won \gset
\if :won = 1
SELECT pg_advisory_unlock(42);
\endif
