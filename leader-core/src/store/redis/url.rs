//! Redis URLs as they may be shown: with the password replaced.

/// `url` with the password of its user-info part replaced by `***`.
///
/// ```text
/// redis://app:s3cret@cache:6379/0  ->  redis://app:***@cache:6379/0
/// redis://:s3cret@cache            ->  redis://:***@cache
/// ```
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return if url.contains('@') {
            "<unparsable URL with credentials>".to_owned()
        } else {
            url.to_owned()
        };
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split_once(':').map_or(user_info, |(user, _password)| user);
            format!("{scheme}://{user}:***@{host}{tail}")
        }
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
