//! The store's names (schema, table prefix, channel), checked to be plain identifiers, and
//! the statements built from them.

use super::ACQUIRE_SQL;
use crate::error::Error;

/// The longest identifier PostgreSQL keeps (`NAMEDATALEN - 1` bytes); a longer `LISTEN`
/// channel is silently truncated, and `pg_notify` refuses it.
pub(super) const MAX_IDENTIFIER: usize = 63;

/// The longest group key the store takes, in bytes: a slot's primary key (key, token) must
/// fit a B-tree index entry (2,704 bytes with PostgreSQL's default 8 kB pages, less for a
/// key that does not compress), and a release notifies with the key as its payload
/// (under 8,000 bytes).
pub(crate) const MAX_KEY_BYTES: usize = 2048;

/// Words PostgreSQL reserves (`pg_get_keywords()`, categories R and T, up to version 17):
/// none can be a schema name without quotes, and the store's names are never quoted.
const RESERVED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

/// Every name the store uses, checked to be plain identifiers (so they need no quoting),
/// and the statements built from them.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(super) schema: String,
    pub(super) prefix: String,
    /// The NOTIFY channel releases are sent on.
    pub channel: String,
    pub acquire_sql: String,
    /// The acquire statement of a request that claims the group's next free slot: on a
    /// refusal it calls the claim function, with `$6` (ms waited), `$7` (ms to hold) and
    /// `$8` (the priority).
    pub acquire_claiming_sql: String,
    pub renew_sql: String,
    /// Renews the slots of keys `$1` under tokens `$2` (arrays, in the same order), each to
    /// `$3` ms, in one statement: a row per slot, in order.
    pub renew_many_sql: String,
    pub release_sql: String,
    pub revoke_sql: String,
    pub state_sql: String,
    pub state_many_sql: String,
    /// The group `$1`'s live claim (a row, or none), with the holder an operator prefers
    /// (`preferred`, NULL for none).
    pub claim_info_sql: String,
    /// Records `$2` as the preferred holder of group `$1` for `$3` ms (and drops lapsed
    /// preferences); withdraws group `$1`'s; reads it (a row, or none).
    pub prefer_sql: String,
    pub unprefer_sql: String,
    pub preference_sql: String,
    pub list_sql: String,
    /// Announces waiters of group `$1` (on the LISTEN connection), and withdraws them.
    pub announce_sql: String,
    pub withdraw_sql: String,
    /// Announces observers of group `$1` (waiters too, so releases notify), and withdraws
    /// them.
    pub observe_sql: String,
    pub unobserve_sql: String,
}

/// The key of group `$1`'s waiting lock, as `{prefix}wait_key($1)` computes it
/// (sql/tables.sql).
fn waiting(schema: &str, prefix: &str) -> String {
    format!("hashtextextended($1::text, hashtext('leader-core waiting {schema}.{prefix}groups'))")
}

/// The key of group `$1`'s observing lock, as `{prefix}observe_key($1)` computes it.
fn observing(schema: &str, prefix: &str) -> String {
    format!("hashtextextended($1::text, hashtext('leader-core observing {schema}.{prefix}groups'))")
}

impl Names {
    /// The names for tables `{prefix}groups` and `{prefix}slots` in `schema`.
    pub(crate) fn new(schema: &str, prefix: &str) -> Result<Self, Error> {
        check_identifier("schema", schema, MAX_IDENTIFIER, false)?;
        if RESERVED.contains(&schema) {
            return Err(Error::invalid_option(
                "schema",
                schema,
                "is a word PostgreSQL reserves; choose another name (for example `leader`)",
            ));
        }
        // Leaves room for the longest name made from it (`{prefix}lock_key`, and the
        // `{prefix}groups_pkey` index) within PostgreSQL's 63 bytes.
        check_identifier("table_prefix", prefix, 40, true)?;
        let qualified = |name: &str| format!("{schema}.{prefix}{name}");
        let acquire_sql = ACQUIRE_SQL.replace("__S__", schema).replace("__P__", prefix);
        Ok(Names {
            channel: channel(schema, prefix),
            acquire_claiming_sql: format!(
                "SELECT CASE WHEN attempt.a[1] = 0 \
                 THEN {}($1::text, $2::text, $3::text, $4::bigint, $5::integer, \
                 $6::bigint, $7::bigint, $8::integer, attempt.a) \
                 ELSE attempt.a END FROM (\n{acquire_sql}\n) AS attempt(a)",
                qualified("claim")
            ),
            acquire_sql,
            renew_sql: format!("SELECT * FROM {}($1, $2, $3)", qualified("renew")),
            renew_many_sql: format!(
                "SELECT r.* FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(key, token, n) \
                 CROSS JOIN LATERAL {}(u.key, u.token, $3) AS r ORDER BY u.n",
                qualified("renew")
            ),
            release_sql: format!("SELECT * FROM {}($1, $2, $3)", qualified("release")),
            revoke_sql: format!("SELECT * FROM {}($1, $2, $3, $4, $5)", qualified("revoke")),
            state_sql: format!("SELECT * FROM {}($1)", qualified("state")),
            claim_info_sql: format!(
                "SELECT c.*, {}($1) AS preferred FROM {}($1) AS c",
                qualified("preferred"),
                qualified("claim_info")
            ),
            prefer_sql: format!(
                "WITH lapsed AS (DELETE FROM {0} WHERE held_until <= clock_timestamp() AND key <> $1) \
                 INSERT INTO {0} AS p (key, holder, held_until) \
                 VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond') \
                 ON CONFLICT (key) DO UPDATE \
                 SET holder = excluded.holder, held_until = excluded.held_until",
                qualified("preferences")
            ),
            unprefer_sql: format!("DELETE FROM {} WHERE key = $1", qualified("preferences")),
            preference_sql: format!(
                "SELECT p.holder, \
                 ceil(extract(epoch FROM p.held_until - clock_timestamp()) * 1000)::bigint \
                 AS expires_in_ms FROM {} AS p WHERE p.key = $1 AND p.holder = {}($1)",
                qualified("preferences"),
                qualified("preferred")
            ),
            state_many_sql: format!(
                "SELECT u.n, r.* FROM unnest($1::text[]) WITH ORDINALITY AS u(key, n) \
                 CROSS JOIN LATERAL {}(u.key) AS r ORDER BY u.n, r.fence",
                qualified("state")
            ),
            // The announcements compute the lock keys in place (what `{prefix}wait_key` and
            // `{prefix}observe_key` compute) rather than calling the functions, so a waiter
            // or an observer needs no schema: an observer on a database without one writes
            // nothing, and a candidate's watch works before its first acquire migrates.
            announce_sql: format!("SELECT pg_advisory_lock_shared({})", waiting(schema, prefix)),
            withdraw_sql: format!("SELECT pg_advisory_unlock_shared({})", waiting(schema, prefix)),
            observe_sql: format!(
                "SELECT pg_advisory_lock_shared({}), pg_advisory_lock_shared({})",
                waiting(schema, prefix),
                observing(schema, prefix)
            ),
            unobserve_sql: format!(
                "SELECT pg_advisory_unlock_shared({}), pg_advisory_unlock_shared({})",
                observing(schema, prefix),
                waiting(schema, prefix)
            ),
            list_sql: format!(
                "SELECT key FROM {} WHERE starts_with(key, $1) AND right(key, length($2)) = $2 \
                 AND length(key) >= length($1) + length($2) ORDER BY key",
                qualified("groups")
            ),
            schema: schema.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// `schema.prefix{groups,slots}`, for `Debug`.
    pub(crate) fn describe(&self) -> String {
        format!("{0}.{1}groups, {0}.{1}slots", self.schema, self.prefix)
    }
}

/// The NOTIFY channel of the tables in `schema` with `prefix`: `{schema}_{prefix}released`
/// when that fits PostgreSQL's 63 bytes, otherwise `leader_released_` and 16 hex digits
/// of the pair's FNV-1a digest (a channel is database-wide, so two stores' tables never
/// share one).
fn channel(schema: &str, prefix: &str) -> String {
    let readable = format!("{schema}_{prefix}released");
    if readable.len() <= MAX_IDENTIFIER {
        return readable;
    }
    format!("leader_released_{:016x}", digest(&format!("{schema}.{prefix}")))
}

/// FNV-1a, 64 bits: stable across builds and platforms (unlike `std`'s hasher), for the
/// names every process of a deployment must derive alike.
pub(super) fn digest(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A name the store puts into SQL unquoted: lowercase ASCII letters, digits and `_`, not
/// starting with a digit, at most `max` bytes.
/// An empty name is allowed when `may_be_empty` (a prefix).
fn check_identifier(
    option: &'static str,
    name: &str,
    max: usize,
    may_be_empty: bool,
) -> Result<(), Error> {
    let valid_start = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let valid = valid_start
        && name.len() <= max
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid || (may_be_empty && name.is_empty()) {
        return Ok(());
    }
    Err(Error::invalid_option(
        option,
        name,
        format!(
            "must be lowercase ASCII letters, digits and `_`, not starting with a digit, at \
             most {max} bytes"
        ),
    ))
}
