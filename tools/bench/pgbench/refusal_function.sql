-- A refusal alone: the store's acquire function on a held group.
SELECT * FROM leader_acquire('pg-held', '6f1c6a4e-2f9b-4a47-9d61-0b3f6a1b2c3d', 'b', 10000, 1);
