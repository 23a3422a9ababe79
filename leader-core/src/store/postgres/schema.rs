//! The store's names (schema, table prefix, channel), its schema, and the migration that
//! creates it once and checks the shape of what exists.

mod names;

use deadpool_postgres::tokio_postgres::Client;

pub(crate) use self::names::{MAX_KEY_BYTES, Names};
use crate::error::Error;

/// The schema text, one file per operation as the Redis store has one script per
/// operation; `__S__`, `__P__`, `__C__` and `__V__` are the schema, the name prefix, the
/// NOTIFY channel and the version.
const SCHEMA_SQL: &str = concat!(
    include_str!("sql/tables.sql"),
    include_str!("sql/grant.sql"),
    include_str!("sql/claim.sql"),
    include_str!("sql/renew.sql"),
    include_str!("sql/release.sql"),
    include_str!("sql/revoke.sql"),
    include_str!("sql/state.sql"),
);

/// The statement of every acquire attempt (`__S__` and `__P__` as above).
const ACQUIRE_SQL: &str = include_str!("sql/acquire.sql");

/// The version of [`SCHEMA_SQL`], kept as the comment of the grant function: a store finds
/// it there and migrates nothing; it migrates a database of an older version (replacing
/// its functions) and refuses one of a newer version. Bump it when the schema text
/// changes, and record the new text's digest in [`SCHEMA_DIGESTS`] (a test fails until
/// both are done).
const SCHEMA_VERSION: &str = "leader-core schema 11";

/// What precedes the number in a schema version.
const VERSION_PREFIX: &str = "leader-core schema ";

/// Each schema version with the FNV-1a digest of its text (`digest(SCHEMA_SQL)`): the test
/// `the_schema_text_changes_only_with_its_version` fails when the text changes and the
/// version does not, since a database migrated by a build in between would otherwise
/// keep that build's functions for good.
#[cfg(test)]
const SCHEMA_DIGESTS: &[(&str, u64)] = &[
    ("leader-core schema 5", 776250348783746103),
    ("leader-core schema 6", 18106860953845036408),
    ("leader-core schema 7", 12987311710983472742),
    ("leader-core schema 8", 14595019790220804352),
    ("leader-core schema 9", 13912712618655967851),
    ("leader-core schema 10", 11566335678571283665),
    ("leader-core schema 11", 1020743670161332578),
];

/// What the tables must look like: (table suffix, [(column, type as
/// information_schema.columns names it)]).
const SHAPE: [(&str, &[(&str, &str)]); 4] = [
    ("groups", &[("key", "text"), ("max_leaders", "integer"), ("last_fence", "bigint")]),
    (
        "slots",
        &[
            ("key", "text"),
            ("token", "uuid"),
            ("holder", "text"),
            ("fence", "bigint"),
            ("acquired_at", "timestamp with time zone"),
            ("expires_at", "timestamp with time zone"),
        ],
    ),
    (
        "reservations",
        &[
            ("key", "text"),
            ("token", "uuid"),
            ("arrived_at", "timestamp with time zone"),
            ("held_until", "timestamp with time zone"),
            ("priority", "integer"),
            ("holder", "text"),
        ],
    ),
    (
        "preferences",
        &[("key", "text"), ("holder", "text"), ("held_until", "timestamp with time zone")],
    ),
];

/// The columns a migration adds to a table an older schema made (`ALTER TABLE … ADD COLUMN
/// IF NOT EXISTS` in the schema text): (table suffix, column). Schema 10 gave claims a
/// priority and a holder.
const ADDED_COLUMNS: &[(&str, &str)] = &[("reservations", "priority"), ("reservations", "holder")];

impl Names {
    fn schema_sql(&self) -> String {
        SCHEMA_SQL
            .replace("__S__", &self.schema)
            .replace("__P__", &self.prefix)
            .replace("__C__", &self.channel)
            .replace("__V__", SCHEMA_VERSION)
    }
}

/// Creates what is missing, under a transaction-scoped advisory lock so that processes
/// starting together do it one at a time, then checks the tables' shape.
///
/// The store's connections carry a `statement_timeout` for its one-statement operations;
/// the migration sets its own, `bound`.
pub(crate) async fn migrate(
    client: &Client,
    names: &Names,
    bound: std::time::Duration,
) -> Result<(), Error> {
    let failed = |error: deadpool_postgres::tokio_postgres::Error| {
        super::error_class::to_error("migrate", error)
    };
    // The shape first: CREATE TABLE IF NOT EXISTS keeps a table of another shape, and the
    // functions would then fail on every call. (Columns a migration adds may be missing.)
    check_shape(client, names, ADDED_COLUMNS).await?;
    match current_version(client, names).await? {
        Some(found) if found == SCHEMA_VERSION => return Ok(()),
        Some(found) if version_number(&found) > version_number(SCHEMA_VERSION) => {
            return Err(Error::Store {
                store: "postgres",
                endpoint: String::new(),
                operation: "migrate",
                message: format!(
                    "the tables {} are at {found:?}, newer than this build's {SCHEMA_VERSION:?}; \
                     upgrade leader-core, or use another table_prefix or schema",
                    names.describe()
                ),
            });
        }
        _ => {} // none yet, or older: (re)made below
    }
    // CREATE SCHEMA needs a privilege on the database even with IF NOT EXISTS: only when
    // the schema is missing.
    let schema_exists: bool = client
        .query_one("SELECT to_regnamespace($1) IS NOT NULL", &[&names.schema])
        .await
        .map_err(failed)?
        .get(0);
    let create_schema = if schema_exists {
        String::new()
    } else {
        format!("CREATE SCHEMA IF NOT EXISTS {};", names.schema)
    };
    // Under the migration's lock, the version is read again: processes that start together
    // all find none above, and each would otherwise replace the functions the first one
    // made while others call them ("cache lookup failed for function", XX000).
    let lock = format!(
        "BEGIN;\n\
         SET LOCAL statement_timeout = {bound_ms};\n\
         SELECT pg_advisory_xact_lock(hashtext('leader-core migrate {schema}.{prefix}'));",
        schema = names.schema,
        prefix = names.prefix,
        bound_ms = bound.as_millis().max(1),
    );
    let migrated = async {
        client.batch_execute(&lock).await.map_err(failed)?;
        if current_version(client, names).await?.as_deref() == Some(SCHEMA_VERSION) {
            return client.batch_execute("COMMIT").await.map_err(failed);
        }
        let script = format!("{create_schema}\n{body}\nCOMMIT;", body = names.schema_sql());
        client.batch_execute(&script).await.map_err(failed)
    };
    if let Err(error) = migrated.await {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(error);
    }
    check_shape(client, names, &[]).await
}

/// The number of a schema version (0 for text that is not one: older than any).
fn version_number(version: &str) -> u32 {
    version.strip_prefix(VERSION_PREFIX).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// The schema version the grant function carries, if it exists. Read from the catalog's
/// tables by the statement's snapshot, not through the session's catalog cache
/// (`to_regprocedure`): the cache may still say "no such function" after another session
/// committed one, within a transaction that looked before (the migration's re-check under
/// its lock would then migrate again, replacing the functions others are calling).
async fn current_version(client: &Client, names: &Names) -> Result<Option<String>, Error> {
    let function = format!("{}grant", names.prefix);
    let rows = client
        .query(
            "SELECT d.description FROM pg_proc AS p \
             JOIN pg_namespace AS n ON n.oid = p.pronamespace \
             LEFT JOIN pg_description AS d \
               ON d.objoid = p.oid AND d.classoid = 'pg_proc'::regclass AND d.objsubid = 0 \
             WHERE n.nspname = $1 AND p.proname = $2 \
               AND oidvectortypes(p.proargtypes) = 'text, text, text, bigint, integer, boolean'",
            &[&names.schema, &function],
        )
        .await
        .map_err(|error| super::error_class::to_error("migrate", error))?;
    Ok(rows.first().and_then(|row| row.get(0)))
}

/// Fails with a message naming the table, column and types when an existing table differs
/// from [`SHAPE`]; a missing table is fine (the migration makes it), and so is a missing
/// column among `may_miss` (table suffix, column).
async fn check_shape(
    client: &Client,
    names: &Names,
    may_miss: &[(&str, &str)],
) -> Result<(), Error> {
    for (suffix, expected) in SHAPE {
        let table = format!("{}{suffix}", names.prefix);
        let rows = client
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_schema = $1 AND table_name = $2",
                &[&names.schema, &table],
            )
            .await
            .map_err(|error| super::error_class::to_error("migrate", error))?;
        if rows.is_empty() {
            continue;
        }
        let found: Vec<(String, String)> =
            rows.iter().map(|row| (row.get(0), row.get(1))).collect();
        let mut differences = Vec::new();
        for (column, data_type) in expected.iter() {
            match found.iter().find(|(name, _)| name == column) {
                None if may_miss.contains(&(suffix, column)) => {}
                None => differences.push(format!("column `{column}` ({data_type}) is missing")),
                Some((_, actual)) if actual != data_type => {
                    differences.push(format!("column `{column}` is {actual}, expected {data_type}"))
                }
                Some(_) => {}
            }
        }
        if !differences.is_empty() {
            return Err(Error::Store {
                store: "postgres",
                endpoint: String::new(),
                operation: "migrate",
                message: format!(
                    "table {}.{table} exists with another shape: {}; use another \
                     table_prefix or schema, or drop the table",
                    names.schema,
                    differences.join(", ")
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::names::{MAX_IDENTIFIER, digest};
    use super::*;

    #[test]
    fn the_schema_text_changes_only_with_its_version() {
        let (version, recorded) = SCHEMA_DIGESTS.last().copied().expect("a recorded digest");
        let current = digest(SCHEMA_SQL);
        assert_eq!(
            (version, recorded),
            (SCHEMA_VERSION, current),
            "the schema's SQL changed: bump SCHEMA_VERSION and record ({SCHEMA_VERSION:?}, {current}) \
             as a new last entry of SCHEMA_DIGESTS"
        );
        for (i, (version, digest)) in SCHEMA_DIGESTS.iter().enumerate() {
            for (other_version, other_digest) in &SCHEMA_DIGESTS[i + 1..] {
                assert_ne!(version, other_version, "one digest per version");
                assert_ne!(digest, other_digest, "{other_version} changed nothing");
            }
        }
    }

    #[test]
    fn every_derived_name_fits_at_the_limits() {
        let (schema, prefix) = ("s".repeat(63), "p".repeat(40));
        let names = Names::new(&schema, &prefix).unwrap();
        assert!(names.channel.len() <= MAX_IDENTIFIER, "{}", names.channel);
        assert!(names.channel.starts_with("leader_released_"), "{}", names.channel);
        let other = Names::new(&schema, &"q".repeat(40)).unwrap();
        assert_ne!(names.channel, other.channel, "two stores' channels");
        for name in ["groups_pkey", "lock_key", "wait_key", "release", "acquire"] {
            assert!(prefix.len() + name.len() <= MAX_IDENTIFIER, "{prefix}{name}");
        }
        let err = Names::new(&"s".repeat(64), "leader_").unwrap_err().to_string();
        assert!(err.contains("at most 63 bytes"), "{err}");
        let err = Names::new("public", &"p".repeat(41)).unwrap_err().to_string();
        assert!(err.contains("at most 40 bytes"), "{err}");
        // A short pair keeps the readable channel.
        assert_eq!(Names::new("jobs", "x_").unwrap().channel, "jobs_x_released");
    }

    #[test]
    fn a_reserved_word_is_refused_as_a_schema() {
        for word in ["order", "user", "select", "table"] {
            let err = Names::new(word, "leader_").unwrap_err().to_string();
            assert!(err.starts_with(&format!("invalid `schema` \"{word}\"")), "{err}");
            assert!(err.contains("reserves"), "{err}");
        }
        // Words PostgreSQL does not reserve are fine, and so is a reserved word as a
        // prefix (every name made from it is qualified by the schema).
        assert!(Names::new("state", "leader_").is_ok());
        assert!(Names::new("public", "").is_ok());
    }

    #[test]
    fn names_are_plain_identifiers() {
        let names = Names::new("public", "leader_").unwrap();
        assert_eq!(names.channel, "public_leader_released");
        assert!(names.acquire_sql.contains("public.leader_grant($1::text,"));
        assert!(!names.schema_sql().contains("__"));
        for (option, schema, prefix) in
            [("schema", "Public", "x_"), ("schema", "", "x_"), ("table_prefix", "s", "bad-name")]
        {
            let err = Names::new(schema, prefix).unwrap_err().to_string();
            assert!(err.starts_with(&format!("invalid `{option}`")), "{err}");
        }
    }
}
