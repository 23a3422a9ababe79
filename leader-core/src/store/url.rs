//! Store URLs (Redis, PostgreSQL) as they may be shown: with the password replaced.

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
