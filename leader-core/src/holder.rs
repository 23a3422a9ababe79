//! Candidate ids: who holds a slot, as state and logs show it.

use crate::error::Error;

/// The longest holder id accepted, in bytes.
pub const MAX_HOLDER_LEN: usize = 256;

/// The default holder id: `hostname:pid:random`, unique per elector even within one process.
pub fn default_holder_id() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let host = if host.is_empty() { "unknown-host".to_owned() } else { host };
    let mut suffix = [0u8; 4];
    // Uniqueness, not secrecy: a failed draw falls back to the clock's low bits.
    if crate::random::fill(&mut suffix).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        suffix = nanos.to_le_bytes();
    }
    format!("{host}:{}:{:08x}", std::process::id(), u32::from_le_bytes(suffix))
}

/// The holder id an option type was given, or else the [default](default_holder_id);
/// checked either way (see [`check_holder_id`]).
pub(crate) fn chosen_or_default(chosen: Option<&String>) -> Result<String, Error> {
    let holder_id = chosen.cloned().unwrap_or_else(default_holder_id);
    check_holder_id(&holder_id)?;
    Ok(holder_id)
}

/// Checks a holder id: non-empty, no control characters, at most [`MAX_HOLDER_LEN`] bytes.
pub(crate) fn check_holder_id(holder: &str) -> Result<(), Error> {
    let allowed = format!(
        "must be 1 to {MAX_HOLDER_LEN} bytes with no control characters, such as `host:pid`"
    );
    let bad_len = holder.is_empty() || holder.len() > MAX_HOLDER_LEN;
    if bad_len || holder.chars().any(char::is_control) {
        return Err(Error::invalid_option("holder_id", holder, allowed));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ids_are_valid_and_distinct() {
        let (a, b) = (default_holder_id(), default_holder_id());
        check_holder_id(&a).unwrap();
        assert_ne!(a, b);
        assert!(a.contains(&format!(":{}:", std::process::id())), "{a}");
    }

    #[test]
    fn refuses_empty_long_and_control() {
        for bad in [String::new(), "x".repeat(MAX_HOLDER_LEN + 1), "a\nb".to_owned()] {
            let err = check_holder_id(&bad).unwrap_err().to_string();
            assert!(err.contains("holder_id"), "{err}");
        }
    }
}
