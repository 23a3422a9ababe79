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
    let Some((scheme, _)) = url.split_once("://") else {
        // PostgreSQL's `key=value` connection string (`host=db user=app dbname=app`).
        let first = url.split_whitespace().next()?;
        return first.contains('=').then_some(("postgres", "postgres", Some("postgres")));
    };
    // Schemes ignore case (RFC 3986), as the stores' own builders do.
    SCHEMES.iter().copied().find(|(known, _, _)| known.eq_ignore_ascii_case(scheme))
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
/// assert_eq!(store_kind_of("host=db user=app dbname=app"), Some("postgres"));
/// assert_eq!(store_kind_of("REDIS://cache:6379"), Some("redis"));
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

/// `url` with every password replaced by `***`: the user-info part's (whatever characters
/// the password holds, `/`, `?` and `#` included), and the value of a `pass` or `password`
/// query parameter (as Redis's `unix://` and PostgreSQL's URLs take them).
///
/// ```text
/// redis://app:s3cret@cache:6379/0        ->  redis://app:***@cache:6379/0
/// redis://:s3cret@cache                  ->  redis://:***@cache
/// unix:///run/redis.sock?pass=s3cret     ->  unix:///run/redis.sock?pass=***
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
    // The user-info part ends at the last `@`: a password may hold `/`, `?`, `#` or `@`.
    // Only a password is hidden; a user alone is shown as it is.
    let rest = match rest.rsplit_once('@') {
        Some((user_info, after)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{after}"),
            None => rest.to_owned(),
        },
        None => rest.to_owned(),
    };
    format!("{scheme}://{}", redact_query(&rest))
}

/// `rest` with the values of its `pass` and `password` query parameters replaced by `***`.
fn redact_query(rest: &str) -> String {
    let Some((before, query)) = rest.split_once('?') else { return rest.to_owned() };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _))
                if ["pass", "password"].contains(&name.to_ascii_lowercase().as_str()) =>
            {
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
    format!("{before}?{}{fragment}", pairs.join("&"))
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
        for raw in ["pa/ss", "pa?ss", "pa#ss", "pa@ss/x?y#z"] {
            for url in [
                format!("redis://u:{raw}@127.0.0.1:6379"),
                format!("redis+cluster://u:{raw}@h:1,h:2"),
                format!("postgres://u:{raw}@h/db"),
            ] {
                assert!(!redact(&url).contains(raw), "{url} -> {}", redact(&url));
            }
        }
        assert_eq!(
            redact("redis+unix:///tmp/r.sock?user=default&pass=s3cret&db=9"),
            "redis+unix:///tmp/r.sock?user=default&pass=***&db=9"
        );
        assert_eq!(
            redact("postgresql://h/db?Password=s3cret#x"),
            "postgresql://h/db?Password=***#x"
        );
        assert_eq!(redact("redis://h/?user=a@b"), "redis://h/?user=a@b", "a user alone is shown");
    }
}
