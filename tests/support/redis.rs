//! Helpers for the Redis suites: a store on a fresh server, the store's own key names, and
//! what the server recorded.

use std::collections::HashMap;

use leader::RedisStore;

use super::redis_server::RedisServer;

/// A store on a fresh standalone server.
pub async fn standalone() -> (RedisStore, RedisServer) {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    (store, server)
}

/// The hash that holds group `key`'s slots, as the store names it.
pub fn group_key(key: &str) -> String {
    RedisStore::group_layout(key).expect("a key the store takes").group
}

/// The marker that group `key` is full, as the store names it.
pub fn full_key(key: &str) -> String {
    RedisStore::group_layout(key).expect("a key the store takes").full
}

/// Live and expired slots recorded for `key` on `server`: the group hash's fields other than
/// the bookkeeping ones.
pub fn slot_records(server: &RedisServer, key: &str) -> usize {
    let fields = server.cli(&["HKEYS", &group_key(key)]);
    let bookkeeping = ["", "max", "fence", "waiting", "watched"];
    let watcher = |field: &str| field.starts_with("watcher:");
    fields.lines().filter(|field| !bookkeeping.contains(field) && !watcher(field)).count()
}

/// The client-sent commands an operation cost, read from the server.
pub async fn round_trips<F: Future>(
    server: &RedisServer,
    operation: F,
) -> (F::Output, HashMap<String, u64>) {
    server.cli(&["CONFIG", "RESETSTAT"]);
    let output = operation.await;
    (output, server.client_commands())
}

/// Every command the server ran since the last reset, including those scripts ran.
pub fn all_commands(server: &RedisServer) -> HashMap<String, u64> {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            Some((name.to_owned(), stats.strip_prefix("calls=")?.split(',').next()?.parse().ok()?))
        })
        .collect()
}

/// The commands scripts ran since the last reset, by name (what clients sent left out).
pub fn commands_inside_scripts(server: &RedisServer) -> HashMap<String, u64> {
    let sent = ["evalsha", "eval", "info", "config|resetstat"];
    all_commands(server).into_iter().filter(|(name, _)| !sent.contains(&name.as_str())).collect()
}

/// Command counts by name, to compare with [`commands_inside_scripts`].
pub fn counts<const N: usize>(named: [(&str, u64); N]) -> HashMap<String, u64> {
    named.into_iter().map(|(name, calls)| (name.to_owned(), calls)).collect()
}
