//! Duration literals: `500ms`, `10s`, `1m30s`, `2h`, or ISO-8601 `PT0.5S`, `PT10M`.

/// The longest duration the runtime accepts, in ms.
const MAX_MILLIS: u128 = leader_core::MAX_DURATION.as_millis();

/// Parses `text` into whole milliseconds (a fractional millisecond rounds up), or says
/// what is wrong: the runtime's own duration syntax, which configuration files use too.
pub(crate) fn parse_millis(text: &str) -> Result<u64, String> {
    let duration = leader_core::__private::parse_duration(text)?;
    let nanos = duration.as_nanos();
    let millis = nanos.div_ceil(1_000_000);
    if millis > MAX_MILLIS {
        return Err(format!("duration {text:?} is longer than the 2^47 ms the stores allow"));
    }
    Ok(millis as u64)
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
