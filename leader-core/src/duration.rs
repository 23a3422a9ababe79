//! Durations as stores keep them: whole milliseconds that stay exact in a store's arithmetic.

use std::time::Duration;

use crate::error::Error;

/// The longest duration any option accepts: 2^47 ms, about 4,460 years.
///
/// Stores add durations to their clock in milliseconds; Redis scripts do so in Lua numbers,
/// which are exact only up to 2^53. Capping options at 2^47 ms keeps `now + duration` exact
/// for every clock that reads Unix time in milliseconds for the next few thousand years.
pub const MAX_DURATION: Duration = Duration::from_millis(1 << 47);

/// The one duration syntax of every option written as text (the macros' arguments and
/// configuration files): `500ms`, `10s`, `1m30s`, `2h`, `1d` (humantime), or ISO-8601
/// `PT0.5S`, `PT10M`, `PT1H30M`. The error says what is wrong and shows the syntax.
pub fn parse(text: &str) -> Result<Duration, String> {
    if text.starts_with('P') {
        let parsed = iso8601_duration::Duration::parse(text).map_err(|_| {
            format!(
                "bad ISO-8601 duration {text:?}; write it like \"PT0.5S\", \"PT10M\" or \"PT1H30M\""
            )
        })?;
        return parsed.to_std().ok_or_else(|| {
            format!("ISO-8601 duration {text:?} uses months or years, which have no fixed length")
        });
    }
    humantime::parse_duration(text).map_err(|error| {
        format!(
            "bad duration {text:?} ({error}); write it like \"500ms\", \"10s\", \"1m30s\", \
             \"2h\" or ISO-8601 \"PT0.5S\""
        )
    })
}

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

/// `duration` in whole milliseconds, rounded up (a store never keeps a slot shorter than
/// asked).
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) fn ceil_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The renewal cadence of a `lease_time` lease: `chosen`, or `lease_time / 3`. Between 1 ms
/// and `lease_time / 2`, so a failed renewal can be retried before the lease ends. The one
/// rule for electors' auto-extension and for leadership.
pub(crate) fn renew_interval(
    lease_time: Duration,
    chosen: Option<Duration>,
) -> Result<Duration, Error> {
    let ceiling = lease_time / 2;
    match chosen {
        None if lease_time / 3 < Duration::from_millis(1) => Err(Error::invalid_option(
            "lease_time",
            lease_time,
            "must be at least 3ms to be renewed, every lease_time / 3 by default",
        )),
        None => Ok(lease_time / 3),
        Some(every) if every < Duration::from_millis(1) || every > ceiling => {
            Err(Error::invalid_option(
                "renew_interval",
                every,
                format!(
                    "must be between 1ms and lease_time / 2 ({ceiling:?}) so renewals beat the \
                     lease"
                ),
            ))
        }
        Some(every) => Ok(every),
    }
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
