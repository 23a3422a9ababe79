//! Duration literals: `500ms`, `10s`, `1m30s`, `2h`, or ISO-8601 `PT0.5S`, `PT10M`.

use std::time::Duration;

/// The longest duration the runtime accepts, in ms.
const MAX_MILLIS: u128 = leader_core::MAX_DURATION.as_millis();

/// Parses `text` into whole milliseconds (a fractional millisecond rounds up), or says
/// what is wrong.
pub(crate) fn parse_millis(text: &str) -> Result<u64, String> {
    let duration = if text.starts_with('P') {
        iso8601(text)?
    } else {
        humantime::parse_duration(text).map_err(|error| {
            format!(
                "bad duration {text:?} ({error}); write it like \"500ms\", \"10s\", \"1m30s\", \
                 \"2h\" or ISO-8601 \"PT0.5S\""
            )
        })?
    };
    let nanos = duration.as_nanos();
    let millis = nanos.div_ceil(1_000_000);
    if millis > MAX_MILLIS {
        return Err(format!("duration {text:?} is longer than the 2^47 ms the stores allow"));
    }
    Ok(millis as u64)
}

fn iso8601(text: &str) -> Result<Duration, String> {
    let parsed = iso8601_duration::Duration::parse(text).map_err(|_| {
        format!(
            "bad ISO-8601 duration {text:?}; write it like \"PT0.5S\", \"PT10M\" or \"PT1H30M\""
        )
    })?;
    parsed.to_std().ok_or_else(|| {
        format!("ISO-8601 duration {text:?} uses months or years, which have no fixed length")
    })
}

#[cfg(test)]
mod tests {
    use super::parse_millis;

    #[test]
    fn accepts_the_documented_forms() {
        for (text, millis) in [
            ("500ms", 500),
            ("10s", 10_000),
            ("1m30s", 90_000),
            ("2h", 7_200_000),
            ("PT0.5S", 500),
            ("PT10M", 600_000),
            ("0s", 0),
            ("1500us", 2),
        ] {
            assert_eq!(parse_millis(text), Ok(millis), "{text}");
        }
    }

    #[test]
    fn refuses_the_rest() {
        for text in ["10", "ten seconds", "P1M", "PTX", "", "-5s"] {
            assert!(parse_millis(text).is_err(), "{text}");
        }
        assert!(parse_millis("100000000y").unwrap_err().contains("2^47"));
    }
}
