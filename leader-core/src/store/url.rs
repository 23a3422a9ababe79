//! Store URLs: which store a scheme names (every store's schemes, in one table, whichever
//! features are built), and a URL as it may be shown, with the password replaced. Each
//! store's builder reads the rest of its own URLs.

/// Every scheme a store reads, with the store's kind (as [`LeaseStore::kind`] names it) and
/// the feature its scheme needs.
///
/// [`LeaseStore::kind`]: super::LeaseStore::kind
pub(crate) const SCHEMES: &[(&str, &str, Option<&str>)] = &[
    ("memory", "memory", None),
    ("redis", "redis", Some("redis")),
    ("rediss", "redis", Some("redis-tls")),
    ("unix", "redis", Some("redis")),
    ("redis+unix", "redis", Some("redis")),
    ("redis+sentinel", "redis", Some("redis")),
    ("redis+cluster", "redis", Some("redis")),
    ("postgres", "postgres", Some("postgres")),
    ("postgresql", "postgres", Some("postgres")),
    ("etcd", "etcd", Some("etcd")),
    ("etcds", "etcd", Some("etcd-tls")),
];

/// `url`'s scheme, with the kind of store it names and the feature that store needs; `None`
/// for a scheme no store reads.
pub(crate) fn scheme_of(url: &str) -> Option<(&'static str, &'static str, Option<&'static str>)> {
    let scheme = url.split_once("://")?.0;
    SCHEMES.iter().copied().find(|(known, _, _)| *known == scheme)
}

/// The kind of store `url` names (`memory`, `redis`, `postgres` or `etcd`, as
/// [`LeaseStore::kind`](super::LeaseStore::kind) names it), whether or not this build has
/// its feature; `None` for a scheme no store reads. For a program that takes a URL and
/// wants to say which store it is about to use, without a table of its own.
///
/// ```
/// use leader_core::store::store_kind_of;
///
/// assert_eq!(store_kind_of("redis+sentinel://10.0.0.7:26379/mymaster"), Some("redis"));
/// assert_eq!(store_kind_of("postgresql://app@db/app"), Some("postgres"));
/// assert_eq!(store_kind_of("mysql://db/app"), None);
/// ```
pub fn store_kind_of(url: &str) -> Option<&'static str> {
    scheme_of(url).map(|(_, kind, _)| kind)
}

/// The schemes of [`SCHEMES`], listed for an error message: `memory://, redis://, … or
/// etcds://`.
pub(crate) fn listed() -> String {
    let schemes: Vec<String> =
        SCHEMES.iter().map(|(scheme, _, _)| format!("{scheme}://")).collect();
    match schemes.split_last() {
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// `url` with the password of its user-info part replaced by `***`.
///
/// ```text
/// redis://app:s3cret@cache:6379/0  ->  redis://app:***@cache:6379/0
/// redis://:s3cret@cache            ->  redis://:***@cache
/// ```
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // A PostgreSQL `key=value` connection string.
        if url.contains("password") {
            return "<a connection string with a password>".to_owned();
        }
        return if url.contains('@') {
            "<unparsable URL with credentials>".to_owned()
        } else {
            url.to_owned()
        };
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    // Only a password is hidden; a user alone is shown as it is.
    match authority.rsplit_once('@').and_then(|(user_info, host)| {
        user_info.split_once(':').map(|(user, _password)| (user, host))
    }) {
        Some((user, host)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn hides_passwords() {
        assert_eq!(redact("redis://app:s3cret@cache:6379/0"), "redis://app:***@cache:6379/0");
        assert_eq!(redact("rediss://:s3cret@cache"), "rediss://:***@cache");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("not a url with p@ss"), "<unparsable URL with credentials>");
        assert!(!redact("redis://u:p@ss@host").contains("p@ss"));
    }
}
