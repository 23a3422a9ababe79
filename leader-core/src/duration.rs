//! Durations as stores keep them: whole milliseconds that stay exact in a store's arithmetic.

use std::time::Duration;

use crate::Error;

/// The longest duration any option accepts: 2^47 ms, about 4,460 years.
///
/// Stores add durations to their clock in milliseconds; Redis scripts do so in Lua numbers,
/// which are exact only up to 2^53. Capping options at 2^47 ms keeps `now + duration` exact
/// for every clock that reads Unix time in milliseconds for the next few thousand years.
pub const MAX_DURATION: Duration = Duration::from_millis(1 << 47);

/// Checks that `value` is at most [`MAX_DURATION`].
pub(crate) fn within_limit(option: &'static str, value: Duration) -> Result<Duration, Error> {
    if value > MAX_DURATION {
        return Err(Error::invalid_option(
            option,
            value,
            format!("must be at most {MAX_DURATION:?} (2^47 ms), the store's millisecond range"),
        ));
    }
    Ok(value)
}

/// Checks that `value` is at least one millisecond and at most [`MAX_DURATION`].
pub(crate) fn positive(option: &'static str, value: Duration) -> Result<Duration, Error> {
    if value < Duration::from_millis(1) {
        return Err(Error::invalid_option(option, value, "must be at least 1ms"));
    }
    within_limit(option, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_zero_and_too_large() {
        let zero = positive("lease_time", Duration::ZERO).unwrap_err().to_string();
        assert!(zero.contains("lease_time") && zero.contains("at least 1ms"), "{zero}");
        let huge = within_limit("wait_time", Duration::MAX).unwrap_err().to_string();
        assert!(huge.contains("wait_time") && huge.contains("2^47 ms"), "{huge}");
        assert_eq!(positive("x", MAX_DURATION).unwrap(), MAX_DURATION);
    }
}
