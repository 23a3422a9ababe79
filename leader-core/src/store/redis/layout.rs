//! Where groups live in Redis, for tools that look at them from outside the store (the CLI,
//! the chaos lab, the bench): a group's keys and channels, the groups under a prefix, and
//! the script calls as the store sends them. The layout is spelled out only here and in
//! [`scripts`](super::scripts).

use futures_util::StreamExt;
use redis::AsyncCommands;

use super::RedisStore;
use super::connection::SharedConnection;
use super::scripts::GroupKeys;
use crate::error::Error;

/// Where one group lives in Redis: its keys, which share one hash tag (so a Cluster keeps
/// them on one slot), and the channels its grants and releases are published on.
///
/// ```
/// # #[cfg(feature = "redis")] {
/// let layout = leader_core::RedisStore::group_layout("leader:nightly").unwrap();
/// assert_eq!(layout.group, "{leader:nightly}:group");
/// assert!(leader_core::RedisStore::group_layout("{tagged}").is_err());
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisGroupLayout {
    /// The hash of the group's slots, its `max_leaders`, its last fence, and the marks of
    /// a candidate that may be waiting and of observers watching.
    pub group: String,
    /// The marker that the group is full, until just before its nearest expiry.
    pub full: String,
    /// The holder an operator prefers for the group, while the preference lives.
    pub preferred: String,
    /// Where a grant is published, while a [`GroupObserver`](crate::GroupObserver) (in any
    /// process) watches the group.
    pub grant_channel: String,
    /// Where a release (or a renewal that shortens a slot) is published, while a refused
    /// candidate may be waiting or an observer watches.
    pub release_channel: String,
}

impl RedisStore {
    /// The keys and channels of the group whose store key is `key`. Fails on a key with
    /// `{` or `}`, which the store refuses (they would break the hash tag).
    pub fn group_layout(key: &str) -> Result<RedisGroupLayout, Error> {
        let keys = GroupKeys::new(key)?;
        Ok(RedisGroupLayout {
            group: keys.group().to_string(),
            full: keys.full().to_string(),
            preferred: keys.preferred().to_string(),
            grant_channel: keys.grant_channel().to_string(),
            release_channel: keys.release_channel().to_string(),
        })
    }

    /// [`LeaseStore::list_groups`](crate::LeaseStore::list_groups): found with `SCAN`, which
    /// never blocks the server. A group is listed while its hash exists. Standalone and
    /// Sentinel only: on a Cluster, name the group.
    pub(super) async fn scan_groups(
        &self,
        prefix: &str,
        suffix: &str,
    ) -> Result<Vec<String>, Error> {
        let (_, connection, _) =
            self.inner.connections.get().await.map_err(|e| super::connect_failure("scan", e))?;
        let SharedConnection::Multiplexed(mut connection) = connection else {
            return Err(Error::Store {
                store: "redis",
                endpoint: String::new(),
                operation: "scan",
                message: "listing groups needs one server; on a Redis Cluster, name the group"
                    .to_owned(),
            });
        };
        let group_of = |found: &str| -> Option<String> {
            let key = found.strip_prefix('{')?.strip_suffix("}:group")?;
            let named = key.starts_with(prefix) && key[prefix.len()..].ends_with(suffix);
            (named && GroupKeys::new(key).is_ok()).then(|| key.to_owned())
        };
        let pattern = GroupKeys::new(&format!("{}*{}", glob_escape(prefix), glob_escape(suffix)))?
            .group()
            .to_string();
        let scanned: Vec<redis::RedisResult<String>> = connection
            .scan_match(&pattern)
            .await
            .map_err(|e| super::unavailable("scan", e))?
            .collect()
            .await;
        let mut groups = Vec::new();
        for found in scanned {
            let found = found.map_err(|e| super::unavailable("scan", e))?;
            groups.extend(group_of(&found));
        }
        groups.sort();
        groups.dedup();
        Ok(groups)
    }
}

/// `text` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(text: &str) -> String {
    text.chars().fold(String::new(), |mut out, c| {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
        out
    })
}
