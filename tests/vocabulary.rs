//! One name and one default per idea: every options type's configuration keys and default
//! values are checked against the one list users read, the options table of docs/configuration.md.
#![cfg(feature = "serde")]

use std::collections::BTreeMap;

use leader::{
    KeyOptions, LeaderChannelOptions, LeaderElectionOptions, LeaderGroupElectionOptions,
    LeadershipOptions, PartitionOptions,
};
use serde_json::Value;

/// One row of the options table (docs/configuration.md).
struct Row {
    used_by: String,
    default: String,
}

/// The options table of docs/configuration.md: option name -> who uses it and its default.
fn table() -> BTreeMap<String, Row> {
    let readme = include_str!("../docs/configuration.md");
    let section = readme.split("\n## Options\n").nth(1).expect("an Options section");
    let section = section.split("\n## ").next().unwrap();
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "a row is option | used by | default | meaning: {line}");
        let name = cells[0].trim_matches('`').to_owned();
        let row = Row { used_by: cells[1].to_owned(), default: cells[2].to_owned() };
        assert!(rows.insert(name.clone(), row).is_none(), "`{name}` is listed twice");
    }
    assert!(rows.len() > 10, "the table was not found");
    rows
}

/// Each options type: its name, the words of the "used by" column that mean it, and its
/// configuration form with every default.
fn types() -> Vec<(&'static str, &'static [&'static str], Value)> {
    vec![
        (
            "LeaderElectionOptions",
            &["electors"],
            serde_json::to_value(LeaderElectionOptions::new()).unwrap(),
        ),
        (
            "LeaderGroupElectionOptions",
            &["electors", "group elector"],
            serde_json::to_value(LeaderGroupElectionOptions::new(1)).unwrap(),
        ),
        (
            "LeadershipOptions",
            &["leadership"],
            serde_json::to_value(LeadershipOptions::new()).unwrap(),
        ),
        (
            "LeaderChannelOptions",
            &["channel"],
            serde_json::to_value(LeaderChannelOptions::new()).unwrap(),
        ),
        (
            "PartitionOptions",
            &["partitions"],
            serde_json::to_value(PartitionOptions::new()).unwrap(),
        ),
        ("KeyOptions", &["keys"], serde_json::to_value(KeyOptions::new()).unwrap()),
    ]
}

/// Whether a "used by" cell names one of `words` (as a whole entry, not a substring of
/// another: "group elector" is not "electors").
fn names(used_by: &str, words: &[&str]) -> bool {
    used_by.split(", ").any(|entry| words.iter().any(|word| entry.starts_with(word)))
}

/// A default as the table writes it: `30s`, `false`, `1024`, `leader:{role}`.
fn written(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if text.is_empty() => Some("\"\"".to_owned()),
        Value::String(text) => Some(text.clone()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => Some(number.to_string()),
        Value::Null | Value::Object(_) | Value::Array(_) => None,
    }
}

#[test]
fn every_configuration_key_is_in_the_table_under_its_type_with_its_default() {
    let table = table();
    for (type_name, words, config) in types() {
        let Value::Object(fields) = config else { panic!("{type_name} is not a table") };
        for (key, value) in &fields {
            let row = table.get(key).unwrap_or_else(|| {
                panic!("{type_name}.{key} is not in the options table of docs/configuration.md")
            });
            assert!(
                names(&row.used_by, words),
                "{type_name}.{key}: the table says it is used by {:?}",
                row.used_by
            );
            let required_here =
                row.used_by.contains("(required)") && words.contains(&"group elector");
            if let (Some(default), false) = (written(value), required_here) {
                // One default for every type, or one per type: "`true` (electors), ...".
                let stated = if row.default.contains("` (") {
                    words.iter().any(|word| row.default.contains(&format!("`{default}` ({word}")))
                } else {
                    row.default.starts_with(&format!("`{default}`"))
                };
                assert!(
                    stated,
                    "{type_name}.{key} defaults to {default}, the table says {}",
                    row.default
                );
            }
        }
    }
}

#[test]
fn every_row_of_the_table_is_a_key_of_each_type_it_names() {
    let types = types();
    for (name, row) in table() {
        let mut users = 0;
        for (type_name, words, config) in &types {
            // "electors" names both electors; "group elector" only the group's.
            if names(&row.used_by, words) {
                users += 1;
                assert!(config.get(&name).is_some(), "the table lists `{name}` for {type_name}");
            }
        }
        assert!(users > 0, "`{name}` is used by {:?}, which names no options type", row.used_by);
    }
}

#[test]
fn the_electors_leadership_and_partitions_agree_on_shared_defaults() {
    let election = serde_json::to_value(LeaderElectionOptions::new()).unwrap();
    let leadership = serde_json::to_value(LeadershipOptions::new()).unwrap();
    let partitions = serde_json::to_value(PartitionOptions::new()).unwrap();
    for key in ["lease_time", "renew_interval", "holder_id", "keys"] {
        assert_eq!(election[key], leadership[key], "`{key}` differs");
        assert_eq!(election[key], partitions[key], "`{key}` differs for partitions");
    }
}
