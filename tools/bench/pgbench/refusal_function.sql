-- A refusal alone, by the grant function with its own look (how every acquire was refused
-- before the store's statement looked in plain SQL first), on a held group.
SELECT leader_grant('pg-held', '6f1c6a4e-2f9b-4a47-9d61-0b3f6a1b2c3d', 'b', 10000, 1, false);
