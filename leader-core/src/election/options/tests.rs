//! The electors' options: defaults, and each bad value named in its error.

use super::*;

fn error(options: LeaderGroupElectionOptions) -> String {
    options.validate().unwrap_err().to_string()
}

#[test]
fn defaults_are_valid() {
    let settings = LeaderGroupElectionOptions::new(1).settings().unwrap();
    assert_eq!(settings.lease_time, crate::DEFAULT_LEASE_TIME);
    assert_eq!(settings.wait_time, Duration::ZERO);
    assert_eq!(settings.renew_interval, None);
}

#[test]
fn refuses_zero_leaders() {
    let err = error(LeaderGroupElectionOptions::new(0));
    assert_eq!(err, "invalid `max_leaders` 0: must be at least 1 (1 is a single leader)");
}

#[test]
fn refuses_zero_lease_and_inverted_min_lease() {
    let zero = error(LeaderGroupElectionOptions::new(2).lease_time(Duration::ZERO));
    assert_eq!(zero, "invalid `lease_time` 0ns: must be at least 1ms");
    let inverted = error(
        LeaderGroupElectionOptions::new(2)
            .lease_time(Duration::from_secs(1))
            .min_lease_time(Duration::from_secs(2)),
    );
    assert_eq!(inverted, "invalid `min_lease_time` 2s: must be at most lease_time (1s)");
}

#[test]
fn refuses_durations_beyond_the_store_range() {
    let huge = Duration::from_secs(u64::MAX);
    for (name, options) in [
        ("wait_time", LeaderGroupElectionOptions::new(1).wait_time(huge)),
        ("lease_time", LeaderGroupElectionOptions::new(1).lease_time(huge)),
    ] {
        let err = error(options);
        assert!(err.contains(name) && err.contains("2^47 ms"), "{err}");
    }
}

#[test]
fn refuses_renew_cadences_that_cannot_beat_the_lease() {
    let slow = LeaderGroupElectionOptions::new(1)
        .lease_time(Duration::from_secs(9))
        .auto_extend(true)
        .renew_interval(Duration::from_secs(5));
    assert_eq!(
        error(slow),
        "invalid `renew_interval` 5s: must be between 1ms and lease_time / 2 (4.5s) \
         so renewals beat the lease"
    );
    let tiny_lease =
        LeaderGroupElectionOptions::new(1).lease_time(Duration::from_millis(2)).auto_extend(true);
    assert!(error(tiny_lease).contains("at least 3ms to be renewed"));
    let ok = LeaderGroupElectionOptions::new(1)
        .lease_time(Duration::from_secs(9))
        .auto_extend(true)
        .settings()
        .unwrap();
    assert_eq!(ok.renew_interval, Some(Duration::from_secs(3)));
    let without_auto_extend =
        LeaderGroupElectionOptions::new(1).renew_interval(Duration::from_secs(1));
    assert_eq!(
        error(without_auto_extend),
        "invalid `renew_interval` 1s: only used with auto_extend, which is off"
    );
}

#[test]
fn refuses_bad_holder_and_keys() {
    assert!(error(LeaderGroupElectionOptions::new(1).holder_id("")).contains("holder_id"));
    let keys = KeyOptions::new().format("no-placeholder");
    assert!(error(LeaderGroupElectionOptions::new(1).keys(keys)).contains("{role}"));
}
