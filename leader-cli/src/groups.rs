//! `leader groups`: the groups under the namespace, as the store lists them.

use std::process::ExitCode;

use crate::args::{Cli, Failure};

pub async fn run(cli: &Cli, json: bool) -> Result<ExitCode, Failure> {
    let store = cli.store().await?;
    let (prefix, suffix) =
        cli.key_format.split_once("{role}").unwrap_or((cli.key_format.as_str(), ""));
    let prefix = format!("{}{prefix}", cli.namespace);
    let mut groups = Vec::new();
    for key in store.list_groups(&prefix, suffix).await? {
        let name = key
            .strip_prefix(&prefix)
            .and_then(|k| k.strip_suffix(suffix))
            .unwrap_or(&key)
            .to_owned();
        // A key of the namespace that holds something else (another program's data, a
        // group of another key format) is skipped with a warning: one foreign key must
        // not hide every group.
        match store.state(&key).await {
            Ok(snapshot) => groups.push((name, key, snapshot)),
            Err(error) if !error.is_transient() => {
                eprintln!("warning: skipped {key:?}: {}", leader::error_chain(&error));
            }
            Err(error) => return Err(error.into()),
        }
    }
    if json {
        let list: Vec<serde_json::Value> = groups
            .iter()
            .map(|(name, key, s)| serde_json::json!({"group": name, "key": key, "active": s.leaders.len(), "max_leaders": s.max_leaders}))
            .collect();
        println!("{}", serde_json::Value::Array(list));
    } else if groups.is_empty() {
        println!("no groups under namespace {:?}", cli.namespace);
    } else {
        let width =
            groups.iter().map(|(name, ..)| name.len()).max().unwrap_or(0).max("GROUP".len());
        println!("{:<width$}  {:>6}  KEY", "GROUP", "ACTIVE");
        for (name, key, snapshot) in &groups {
            let active = match snapshot.max_leaders {
                Some(max) => format!("{}/{max}", snapshot.leaders.len()),
                None => "0".to_owned(),
            };
            println!("{name:<width$}  {active:>6}  {key}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
