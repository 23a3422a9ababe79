-- W2: try the group, give it back at once if granted.
SELECT a.outcome AS won, x.t AS tok FROM (SELECT gen_random_uuid()::text AS t) x,
  leader_acquire('pg-w2', x.t, 'b', 10000, 1) a \gset
\if :won = 1
SELECT * FROM leader_release('pg-w2', :tok, 0);
\endif
