-- The PostgreSQL store's schema, part 1 of 7 (schema.rs joins sql/tables.sql, grant.sql,
-- claim.sql, renew.sql, release.sql, revoke.sql and state.sql, in that order): four
-- tables, and the helpers of the functions that follow, one per operation, so each
-- operation is one statement (one round trip). `__S__` is the schema and `__P__` the
-- prefix of every name, both plain identifiers put in by the store.
--
-- A group is one row of __P__groups (its max_leaders and last fence) and a slot one row of
-- __P__slots. Time is the server's clock_timestamp(); every time goes back to the client in
-- microseconds since the Unix epoch. The store's acquire statement (sql/acquire.sql) answers a
-- full group in plain SQL and calls grant only when a slot looks free: most attempts on a
-- contended group are refused, and a plpgsql call costs about as much again as the look.
--
-- Concurrency. Every write to a group is made under the group's transaction-scoped
-- advisory lock (__P__lock_key(key), 64 bits), so its writers take turns; readers never
-- wait. An acquire looks at the group from a snapshot first, and only if a slot looked free
-- takes the lock and looks again, so a refusal writes nothing (no row lock, no transaction
-- id, no WAL). A grant moves the group's fence only from the value its look saw: a grant
-- made in between without the lock (by hand) or unseen by a REPEATABLE READ snapshot makes
-- it a serialization failure, which the store retries, never a slot too many.

CREATE TABLE IF NOT EXISTS __S__.__P__groups (
  key text PRIMARY KEY,
  max_leaders integer NOT NULL,
  last_fence bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS __S__.__P__slots (
  key text NOT NULL,
  token uuid NOT NULL,
  holder text NOT NULL,
  fence bigint NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (key, token)
);

-- A group's claim on its next free slot (fair waiting, priorities), while a waiter keeps
-- one: the highest priority, then the earliest arrival, among the refused requests that
-- claimed it, until `held_until` (a while after its latest claim). Written by claim.sql,
-- honoured and ended by grant.
CREATE TABLE IF NOT EXISTS __S__.__P__reservations (
  key text PRIMARY KEY,
  token uuid NOT NULL,
  arrived_at timestamptz NOT NULL,
  held_until timestamptz NOT NULL
);
-- The claim's priority (higher wins, then the earlier arrival) and its holder: schema 10.
-- Schema 9's claim function (without a priority) is left in place, so processes of that
-- build still running keep claiming (at priority 0) while this one's run beside them.
ALTER TABLE __S__.__P__reservations
  ADD COLUMN IF NOT EXISTS priority integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS holder text NOT NULL DEFAULT '';

-- An operator's preference for the holder that is to lead a group (schema 11), until
-- `held_until`: while it lives, that holder's claim goes before every other (claim.sql).
-- Written by the store's prefer statement; a lapsed row counts as none and goes with the
-- next preference made.
CREATE TABLE IF NOT EXISTS __S__.__P__preferences (
  key text PRIMARY KEY,
  holder text NOT NULL,
  held_until timestamptz NOT NULL
);

-- The functions of an older schema version go first (a changed result type cannot be
-- replaced in place); this runs only when the version is older, in one transaction.
DROP FUNCTION IF EXISTS __S__.__P__acquire(text, text, text, bigint, integer);
DROP FUNCTION IF EXISTS __S__.__P__grant(text, text, text, bigint, integer, boolean);
DROP FUNCTION IF EXISTS __S__.__P__renew(text, text, bigint);
DROP FUNCTION IF EXISTS __S__.__P__release(text, text, bigint);
DROP FUNCTION IF EXISTS __S__.__P__state(text);
DROP FUNCTION IF EXISTS __S__.__P__lock_class();
DROP FUNCTION IF EXISTS __S__.__P__wait_class();

CREATE OR REPLACE FUNCTION __S__.__P__micros(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;
-- (STABLE, as extract on a timestamptz is: so the planner inlines it into each caller.)

-- The key of a group's advisory lock: 64 bits (hashtextextended), so two groups share a
-- lock only by a 64-bit collision (32-bit hashtext collides for names as plain as
-- 'leader:job-28633' and 'leader:job-42639', and two unrelated groups then wait on each
-- other). Seeded per store, so the tables of two stores never share one either.
CREATE OR REPLACE FUNCTION __S__.__P__lock_key(p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT hashtextextended(p_key, hashtext('leader-core __S__.__P__groups'))
$$;

-- The key of the advisory lock that says someone waits for a group's releases: a store's
-- LISTEN connection holds it in shared mode for every group it has waiters of. A release
-- (or a shortening renewal) sends NOTIFY only when it cannot take that lock exclusively:
-- PostgreSQL serialises every committing transaction that sent a NOTIFY, across the
-- cluster, through its WAL flush, so one sent when nobody waits costs every other release.
-- (A waiter announcing itself while a release holds the lock waits for that release's
-- commit, then finds its slot free.)
CREATE OR REPLACE FUNCTION __S__.__P__wait_key(p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT hashtextextended(p_key, hashtext('leader-core waiting __S__.__P__groups'))
$$;


-- The key of the advisory lock that says someone observes a group's holders: a store's
-- LISTEN connection holds it in shared mode (beside wait_key, so releases notify too) for
-- every group it has observers of. A grant sends NOTIFY, with the payload 'granted <key>'
-- (keys hold no spaces), only when it cannot take that lock exclusively.
CREATE OR REPLACE FUNCTION __S__.__P__observe_key(p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT hashtextextended(p_key, hashtext('leader-core observing __S__.__P__groups'))
$$;
