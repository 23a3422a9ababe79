//! Store keys: how a group or role name becomes the key the store keeps it under.

use crate::error::Error;

/// The placeholder that [`KeyOptions::format`] replaces with the group or role name.
pub const ROLE_PLACEHOLDER: &str = "{role}";

/// The key format used unless [`KeyOptions::format`] says otherwise.
pub const DEFAULT_KEY_FORMAT: &str = "leader:{role}";

/// The longest key accepted unless [`KeyOptions::max_len`] says otherwise, in bytes.
pub const DEFAULT_MAX_KEY_LEN: usize = 512;

/// How names are turned into store keys: `namespace + format`, with every `{role}` in the
/// format replaced by the name, or an exact key used as it is.
///
/// Resolution is pure: it touches no store and can run at start-up to validate a
/// configuration.
///
/// ```
/// use leader_core::KeyOptions;
///
/// let keys = KeyOptions::new().namespace("billing:");
/// assert_eq!(keys.resolve("nightly-report")?, "billing:leader:nightly-report");
///
/// let custom = KeyOptions::new().format("locks/{role}/leader");
/// assert_eq!(custom.resolve("outbox")?, "locks/outbox/leader");
///
/// assert!(keys.resolve("has space").is_err());
/// # Ok::<(), leader_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(remote = "Self", default, deny_unknown_fields)
)]
pub struct KeyOptions {
    namespace: String,
    format: String,
    exact_key: Option<String>,
    max_len: usize,
}

crate::serde_support::validated_serde!(KeyOptions, |options: &KeyOptions| options.validate());

impl Default for KeyOptions {
    fn default() -> Self {
        KeyOptions {
            namespace: String::new(),
            format: DEFAULT_KEY_FORMAT.to_owned(),
            exact_key: None,
            max_len: DEFAULT_MAX_KEY_LEN,
        }
    }
}

impl KeyOptions {
    /// The defaults: no namespace, format `leader:{role}`, no exact key, 512 bytes at most.
    pub fn new() -> Self {
        Self::default()
    }

    /// A prefix put before the formatted key, such as `"billing:"`. Default: empty.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The key format; every `{role}` (case-sensitive) is replaced by the name.
    /// Default: `leader:{role}`. It must contain `{role}`, or every name would share one key.
    pub fn format(mut self, format: impl Into<String>) -> Self {
        self.format = format.into();
        self
    }

    /// A key used literally for every name, ignoring namespace and format. Default: none.
    pub fn exact_key(mut self, key: impl Into<String>) -> Self {
        self.exact_key = Some(key.into());
        self
    }

    /// The longest key accepted, in bytes. Default: 512.
    pub fn max_len(mut self, max_len: usize) -> Self {
        self.max_len = max_len;
        self
    }

    /// Checks the options themselves, without a name: the format has a `{role}`, the exact
    /// key (if any) is valid, and the fixed parts fit in `max_len`.
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_len == 0 {
            return Err(Error::invalid_option("max_len", self.max_len, "must be at least 1 byte"));
        }
        if let Some(key) = &self.exact_key {
            return check_key(key, self.max_len);
        }
        if !self.format.contains(ROLE_PLACEHOLDER) {
            return Err(Error::invalid_option(
                "format",
                &self.format,
                "must contain the placeholder `{role}` (or set an exact key instead)",
            ));
        }
        for (option, part) in [("namespace", &self.namespace), ("format", &self.format)] {
            if let Some(bad) = part.chars().find(|c| c.is_whitespace() || c.is_control()) {
                return Err(Error::invalid_option(
                    option,
                    part,
                    format!("must not contain whitespace or control characters (found {bad:?})"),
                ));
            }
        }
        let fixed_len = self.namespace.len() + self.format.replace(ROLE_PLACEHOLDER, "").len();
        if fixed_len >= self.max_len {
            return Err(Error::invalid_option(
                "format",
                &self.format,
                format!(
                    "namespace and format leave no room for a name within max_len {} bytes",
                    self.max_len
                ),
            ));
        }
        Ok(())
    }

    /// The store key for `name`: the exact key if one is set, else namespace + format with
    /// every `{role}` replaced by `name`.
    ///
    /// The name must be non-empty with no whitespace or control characters; the key must
    /// also fit in `max_len` bytes.
    pub fn resolve(&self, name: &str) -> Result<String, Error> {
        check_name(name)?;
        let key = match &self.exact_key {
            Some(key) => key.clone(),
            None => format!("{}{}", self.namespace, self.format.replace(ROLE_PLACEHOLDER, name)),
        };
        check_key(&key, self.max_len)?;
        Ok(key)
    }
}

/// Checks a group or role name: non-empty, no whitespace, no control characters.
pub fn check_name(name: &str) -> Result<(), Error> {
    let invalid = |reason: String| Err(Error::InvalidName { name: name.to_owned(), reason });
    if name.is_empty() {
        return invalid("must not be empty".to_owned());
    }
    if let Some(bad) = name.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return invalid(format!(
            "must not contain whitespace or control characters (found {bad:?}); use `-` or `_`"
        ));
    }
    Ok(())
}

fn check_key(key: &str, max_len: usize) -> Result<(), Error> {
    let invalid = |reason: String| Err(Error::InvalidKey { key: key.to_owned(), reason });
    if key.is_empty() {
        return invalid("must not be empty".to_owned());
    }
    if let Some(bad) = key.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return invalid(format!(
            "must not contain whitespace or control characters (found {bad:?})"
        ));
    }
    if key.len() > max_len {
        return invalid(format!(
            "is {} bytes long; at most {max_len} bytes are allowed (raise max_len or shorten the name)",
            key.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_format_and_namespace() {
        assert_eq!(KeyOptions::new().resolve("jobs").unwrap(), "leader:jobs");
        let keys = KeyOptions::new().namespace("app:");
        assert_eq!(keys.resolve("jobs").unwrap(), "app:leader:jobs");
    }

    #[test]
    fn every_placeholder_is_replaced_case_sensitively() {
        let keys = KeyOptions::new().format("{role}/{ROLE}/{role}");
        assert_eq!(keys.resolve("a").unwrap(), "a/{ROLE}/a");
    }

    #[test]
    fn exact_key_is_used_literally() {
        let keys = KeyOptions::new().namespace("ignored:").exact_key("the-one-key");
        assert_eq!(keys.resolve("x").unwrap(), "the-one-key");
        assert_eq!(keys.resolve("y").unwrap(), "the-one-key");
    }

    #[test]
    fn names_are_validated() {
        for bad in ["", "a b", "tab\there", "nl\n", "nul\0"] {
            let err = KeyOptions::new().resolve(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidName { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn keys_longer_than_max_len_are_refused() {
        let keys = KeyOptions::new().max_len(16);
        assert_eq!(keys.resolve("abcdefghi").unwrap(), "leader:abcdefghi"); // exactly 16
        let err = keys.resolve("abcdefghij").unwrap_err().to_string();
        assert!(err.contains("17 bytes") && err.contains("at most 16"), "{err}");
    }

    #[test]
    fn options_are_validated_without_a_name() {
        assert!(KeyOptions::new().validate().is_ok());
        let no_placeholder = KeyOptions::new().format("leader").validate().unwrap_err();
        assert!(no_placeholder.to_string().contains("{role}"), "{no_placeholder}");
        let spaced = KeyOptions::new().namespace("my app:").validate().unwrap_err();
        assert!(spaced.to_string().contains("namespace"), "{spaced}");
        let bad_exact = KeyOptions::new().exact_key("").validate().unwrap_err();
        assert!(matches!(bad_exact, Error::InvalidKey { .. }), "{bad_exact}");
        let no_room = KeyOptions::new().max_len(7).validate().unwrap_err();
        assert!(no_room.to_string().contains("no room"), "{no_room}");
        assert!(KeyOptions::new().max_len(0).validate().is_err());
    }
}
