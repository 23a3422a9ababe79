#!/usr/bin/env bash
# A private PostgreSQL (as the tests make it) with the store's schema in `public` and the
# groups the scripts use: `pg-held` (held for an hour) for refusals alone, `pg-w2` for W2.
# Also `leader_release_loud`, the release function notifying whether or not anybody waits
# (as before schema version 5), for w1_loud.
# Usage: bash setup.sh DIR PORT [durable]   (as root: the server runs as `postgres`)
# `durable` keeps fsync on (the tests' servers, and this one by default, turn it off).
set -euo pipefail
dir=$1 port=$2 bin=$(pg_config --bindir)
fsync="-c fsync=off"; [ "${3:-}" = durable ] && fsync=""
here=$(cd "$(dirname "$0")" && pwd)
as=(); [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
mkdir -p "$dir" && { [ ${#as[@]} -eq 0 ] || chown postgres "$dir"; }
"${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres -A trust >/dev/null
"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start -o \
  "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir $fsync -c max_connections=200"
psql=("$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres)
sql="$here/../../../leader-core/src/store/postgres/sql"
cat "$sql/tables.sql" "$sql/grant.sql" "$sql/renew.sql" "$sql/release.sql" "$sql/state.sql" \
  | sed -e 's/__S__/public/g; s/__P__/leader_/g; s/__C__/public_leader_released/g; s/__V__/pgbench/g' \
  | "${psql[@]}" -f - 2>&1 | grep -v NOTICE || true
"${psql[@]}" -c "SELECT leader_grant('pg-held', gen_random_uuid()::text, 'holder', 3600000, 1, false)" >/dev/null
"${psql[@]}" -A -t -c "SELECT pg_get_functiondef('leader_release'::regproc)" \
  | sed -e 's/leader_release(/leader_release_loud(/; s/IF NOT pg_try_advisory_xact_lock.*THEN/IF true THEN/' \
  | "${psql[@]}" -f -
"${psql[@]}" -c "CREATE TABLE bench_leases (key text PRIMARY KEY, holder text NOT NULL, expires_at timestamptz NOT NULL)"
"${psql[@]}" -c "INSERT INTO bench_leases VALUES ('pg-held', 'holder', 'infinity'), ('pg-w2', '', '-infinity')"
echo "ready: pgbench -n -M prepared -h 127.0.0.1 -p $port -U postgres -c 64 -j 2 -T 6 -f SCRIPT postgres"
