//! Options from configuration (feature `serde`): round trips, humantime durations, and the
//! builders' validation at load time.
#![cfg(feature = "serde")]

use std::time::Duration;

use leader::{
    FullMode, KeyOptions, LeaderChannelOptions, LeaderElectionOptions, LeaderGroupElectionOptions,
    LeadershipOptions, LeaseTiming, PartitionOptions, WhenUncoordinated,
};
use serde::de::DeserializeOwned;

fn round_trip<T: serde::Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    let text = toml::to_string(value).expect("serializes");
    let back: T = toml::from_str(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
    assert_eq!(&back, value, "through TOML:\n{text}");
    let json = serde_json::to_string(value).unwrap();
    assert_eq!(&serde_json::from_str::<T>(&json).unwrap(), value, "through JSON: {json}");
}

#[test]
fn every_options_type_round_trips() {
    let keys = KeyOptions::new().namespace("billing:").format("locks:{role}").max_len(128);
    round_trip(&keys);
    round_trip(&KeyOptions::new().exact_key("the-lock"));
    let timing = LeaseTiming::new()
        .lease_time(Duration::from_secs(9))
        .renew_interval(Duration::from_secs(2))
        .retry_interval(Duration::from_millis(300));
    round_trip(&timing);
    round_trip(&LeadershipOptions::new().timing(timing.clone()));
    round_trip(&PartitionOptions::new().timing(timing.clone()));
    round_trip(&LeaderElectionOptions::new().auto_extend(true).timing(timing));
    let election = LeaderElectionOptions::new()
        .wait_time(Duration::from_millis(500))
        .lease_time(Duration::from_secs(90))
        .min_lease_time(Duration::from_secs(30))
        .auto_extend(true)
        .renew_interval(Duration::from_secs(20))
        .priority(7)
        .holder_id("node-1")
        .keys(keys.clone());
    round_trip(&election);
    round_trip(&LeaderGroupElectionOptions::from_election(3, election));
    round_trip(
        &LeadershipOptions::new()
            .lease_time(Duration::from_secs(20))
            .renew_interval(Duration::from_secs(5))
            .retry_jitter(Duration::from_millis(100))
            .max_leaders(2)
            .when_uncoordinated(WhenUncoordinated::Lead)
            .priority(-3)
            .step_down_delay(Duration::from_millis(1500))
            .keys(keys),
    );
    round_trip(
        &PartitionOptions::new()
            .lease_time(Duration::from_secs(12))
            .renew_interval(Duration::from_secs(4))
            .retry_interval(Duration::from_millis(250))
            .handover_grace(Duration::from_secs(3))
            .holder_id("consumer-a")
            .keys(KeyOptions::new().namespace("jobs:")),
    );
    round_trip(&PartitionOptions::new());
    round_trip(
        &LeaderChannelOptions::new()
            .capacity(16)
            .full_mode(FullMode::DropNewest)
            .drain_on_loss(true),
    );
}

#[test]
fn durations_are_humantime_strings_and_omitted_fields_keep_their_defaults() {
    let group: LeaderGroupElectionOptions = toml::from_str(
        r#"
        max_leaders = 3
        wait_time = "500ms"
        lease_time = "1m 30s"
        keys = { namespace = "jobs:" }
        "#,
    )
    .unwrap();
    let expected = LeaderGroupElectionOptions::new(3)
        .wait_time(Duration::from_millis(500))
        .lease_time(Duration::from_secs(90))
        .keys(KeyOptions::new().namespace("jobs:"));
    assert_eq!(group, expected);
    let leadership: LeadershipOptions = toml::from_str(r#"when_uncoordinated = "lead""#).unwrap();
    assert_eq!(leadership, LeadershipOptions::new().when_uncoordinated(WhenUncoordinated::Lead));
    let partitions: PartitionOptions = toml::from_str(
        r#"
        lease_time = "9s"
        handover_grace = "1s"
        "#,
    )
    .unwrap();
    let expected = PartitionOptions::new()
        .lease_time(Duration::from_secs(9))
        .handover_grace(Duration::from_secs(1));
    assert_eq!(partitions, expected);
}

fn load_error<T: DeserializeOwned + std::fmt::Debug>(text: &str) -> String {
    toml::from_str::<T>(text).expect_err("refused").to_string()
}

#[test]
fn invalid_values_fail_at_load_time_with_the_builders_messages() {
    let cases = [
        (
            load_error::<LeaderElectionOptions>(r#"lease_time = "0s""#),
            "invalid `lease_time` 0ns: must be at least 1ms",
        ),
        (
            load_error::<LeaderElectionOptions>(
                r#"lease_time = "10s"
min_lease_time = "1m""#,
            ),
            "invalid `min_lease_time` 60s: must be at most lease_time (10s)",
        ),
        (load_error::<LeaderGroupElectionOptions>(r#"max_leaders = 0"#), "invalid `max_leaders` 0"),
        (
            load_error::<LeaderGroupElectionOptions>(r#"wait_time = "1s""#),
            "missing field `max_leaders`",
        ),
        (
            load_error::<LeadershipOptions>(
                r#"lease_time = "10s"
renew_interval = "6s""#,
            ),
            "invalid `renew_interval` 6s",
        ),
        (load_error::<KeyOptions>(r#"format = "static""#), "invalid `format` \"static\""),
        (load_error::<LeaderChannelOptions>(r#"capacity = 0"#), "invalid `capacity` 0"),
        (load_error::<LeaderElectionOptions>(r#"wait_time = "soon""#), "soon"),
        (load_error::<LeaderElectionOptions>(r#"lease = "10s""#), "unknown field `lease`"),
        (load_error::<LeadershipOptions>(r#"lease = "10s""#), "unknown field `lease`"),
        (
            load_error::<LeaderElectionOptions>(r#"renew_interval = "1s""#),
            "invalid `renew_interval` 1s: only used with auto_extend",
        ),
        (
            load_error::<LeaderGroupElectionOptions>(
                r#"max_leaders = 2
lease = "10s""#,
            ),
            "unknown field `lease`",
        ),
        (
            load_error::<LeadershipOptions>(r#"when_uncoordinated = "panic""#),
            "unknown variant `panic`",
        ),
        // One check per shared time, whichever type embeds it.
        (
            load_error::<PartitionOptions>(r#"retry_interval = "0s""#),
            "invalid `retry_interval` 0ns: must be at least 1ms",
        ),
        (
            load_error::<LeaderElectionOptions>(r#"retry_interval = "0.5ms""#),
            "invalid `retry_interval` 500µs: must be at least 1ms",
        ),
        (
            load_error::<PartitionOptions>(r#"renew_interval = "0s""#),
            "invalid `renew_interval` 0ns: must be between 1ms and lease_time / 2 (15s)",
        ),
        (
            load_error::<LeaseTiming>(
                r#"lease_time = "4s"
renew_interval = "3s""#,
            ),
            "invalid `renew_interval` 3s: must be between 1ms and lease_time / 2 (2s)",
        ),
        (load_error::<LeaseTiming>(r#"holder_id = "a""#), "unknown field `holder_id`"),
        (
            load_error::<PartitionOptions>(
                r#"lease_time = "10s"
handover_grace = "20s""#,
            ),
            "invalid `handover_grace` 20s: must be at most lease_time (10s)",
        ),
        (load_error::<PartitionOptions>(r#"holder_id = """#), "invalid `holder_id`"),
        (load_error::<PartitionOptions>(r#"count = 8"#), "unknown field `count`"),
    ];
    let twice =
        serde_json::from_str::<PartitionOptions>(r#"{"lease_time": "9s", "lease_time": "3s"}"#);
    assert!(twice.unwrap_err().to_string().contains("duplicate field `lease_time`"));
    let twice = serde_json::from_str::<LeaderGroupElectionOptions>(
        r#"{"max_leaders": 2, "wait_time": "1s", "max_leaders": 3}"#,
    );
    assert!(twice.unwrap_err().to_string().contains("duplicate field `max_leaders`"));
    for (error, expected) in cases {
        assert!(error.contains(expected), "{error:?} does not mention {expected:?}");
    }
    // An unknown key's list of what is allowed has the shared times (and a group's
    // `max_leaders`), which are read apart from the other keys.
    for (error, allowed) in [
        (load_error::<PartitionOptions>("lease = 1"), ["weight", "lease_time", "retry_interval"]),
        (
            load_error::<LeaderGroupElectionOptions>("max_leaders = 2\nlease = 1"),
            ["wait_time", "renew_interval", "max_leaders"],
        ),
    ] {
        for key in allowed {
            assert!(error.contains(&format!("`{key}`")), "{error:?} does not list `{key}`");
        }
    }
}

/// A value that is wrong by itself is reported at its key (line and column of the value),
/// with the builders' message; a duration takes the one syntax the macros take too, and a
/// bad one shows it.
#[test]
fn errors_point_at_the_key_and_durations_take_one_syntax() {
    let at_line_3 = |error: String, expected: &str| {
        assert!(error.contains("line 3"), "not at the key: {error}");
        assert!(error.contains(expected), "{error:?} does not mention {expected:?}");
    };
    let group = "max_leaders = 3\nwait_time = \"1s\"\n";
    at_line_3(
        load_error::<LeaderGroupElectionOptions>(&format!("{group}lease_time = \"10\"")),
        r#"bad duration "10" (time unit needed"#,
    );
    at_line_3(
        load_error::<LeaderGroupElectionOptions>(&format!("{group}lease_time = \"0s\"")),
        "invalid `lease_time` 0ns: must be at least 1ms",
    );
    at_line_3(
        load_error::<LeaderGroupElectionOptions>(
            "wait_time = \"1s\"\nlease_time = \"10s\"\nmax_leaders = 0",
        ),
        "invalid `max_leaders` 0",
    );
    at_line_3(
        load_error::<LeadershipOptions>(
            "max_leaders = 2\nlease_time = \"10s\"\nretry_interval = \"soon\"",
        ),
        r#"bad duration "soon""#,
    );
    at_line_3(
        load_error::<LeadershipOptions>(
            "max_leaders = 2\nlease_time = \"10s\"\nholder_id = \"\"\n",
        ),
        "holder",
    );
    at_line_3(
        load_error::<LeadershipOptions>(
            "priority = 2\nlease_time = \"10s\"\nstep_down_delay = \"0s\"",
        ),
        "invalid `step_down_delay` 0ns: must be at least 1ms",
    );
    at_line_3(
        load_error::<LeaderElectionOptions>(
            "auto_extend = true\nlease_time = \"9s\"\nrenew_interval = 5",
        ),
        r#"a duration such as "500ms""#,
    );
    // A key no options type has, or a shared time out of range, beside the timing's keys.
    at_line_3(
        load_error::<PartitionOptions>("lease_time = \"9s\"\nweight = 2\nlease = \"1s\""),
        "unknown field `lease`",
    );
    at_line_3(
        load_error::<LeaderGroupElectionOptions>(&format!("{group}lese_time = \"1s\"")),
        "unknown field `lese_time`",
    );
    at_line_3(
        load_error::<LeadershipOptions>(
            "max_leaders = 2\nlease_time = \"9s\"\nretry_interval = \"0s\"",
        ),
        "invalid `retry_interval` 0ns: must be at least 1ms",
    );
    // ISO-8601, as the macros take it.
    let iso: LeaderGroupElectionOptions =
        toml::from_str("max_leaders = 2\nlease_time = \"PT10S\"\nwait_time = \"PT0.5S\"").unwrap();
    assert_eq!(
        iso,
        LeaderGroupElectionOptions::new(2)
            .lease_time(Duration::from_secs(10))
            .wait_time(Duration::from_millis(500))
    );
    // A check that compares two options names both.
    let both = load_error::<LeaderElectionOptions>("lease_time = \"10s\"\nmin_lease_time = \"1m\"");
    assert!(both.contains("`min_lease_time` 60s: must be at most lease_time (10s)"), "{both}");
}
