//! `leader groups`: the groups under the namespace, found by their group hashes.

use std::process::ExitCode;

use futures_util::StreamExt;
use leader::LeaseStore;
use leader::deadpool_redis::redis;
use leader::deadpool_redis::redis::AsyncCommands;

use crate::args::{Cli, Failure};

pub async fn run(cli: &Cli, json: bool) -> Result<ExitCode, Failure> {
    let store = cli.store().await?;
    let (prefix, suffix) =
        cli.key_format.split_once("{role}").unwrap_or((cli.key_format.as_str(), ""));
    let prefix = format!("{}{prefix}", cli.namespace);
    let client = redis::Client::open(cli.url.as_str())?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    // Every group that was ever granted keeps its hash `{key}:group` (it has no TTL, so its
    // last fence survives); SCAN never blocks the server.
    let pattern = format!("{{{}*{}}}:group", glob_escape(&prefix), glob_escape(suffix));
    let scanned: Vec<redis::RedisResult<String>> =
        connection.scan_match(&pattern).await?.collect().await;
    let mut keys = scanned.into_iter().collect::<Result<Vec<String>, _>>()?;
    keys.sort();
    let mut groups = Vec::new();
    for group_key in keys {
        let Some(key) = group_key.strip_prefix('{').and_then(|k| k.strip_suffix("}:group")) else {
            continue;
        };
        let name = key
            .strip_prefix(&prefix)
            .and_then(|k| k.strip_suffix(suffix))
            .unwrap_or(key)
            .to_owned();
        let snapshot = store.state(key).await?;
        groups.push((name, key.to_owned(), snapshot));
    }
    if json {
        let list: Vec<serde_json::Value> = groups
            .iter()
            .map(|(name, key, s)| serde_json::json!({"group": name, "key": key, "active": s.slots.len(), "max_leaders": s.max_leaders}))
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
                Some(max) => format!("{}/{max}", snapshot.slots.len()),
                None => "0".to_owned(),
            };
            println!("{name:<width$}  {active:>6}  {key}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `text` with the glob characters of SCAN MATCH escaped.
fn glob_escape(text: &str) -> String {
    text.chars().fold(String::new(), |mut out, c| {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
        out
    })
}
