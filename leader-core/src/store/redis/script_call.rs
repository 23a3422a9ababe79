//! The store's script calls as it sends them, for the bench (feature
//! `unstable-script-calls`; not a stable API).

use super::scripts::{ACQUIRE, GroupKeys, RELEASE};
use crate::error::Error;

/// A script call as the store sends it: the script's source (to `SCRIPT LOAD`) and the
/// arguments after `EVALSHA <sha1>`. For the bench's ceiling measurement, which replays the
/// calls with `redis-benchmark`; not a stable API (feature `unstable-script-calls`).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ScriptCall {
    /// The Lua source.
    pub source: &'static str,
    /// `numkeys`, the keys, then the arguments.
    pub args: Vec<String>,
}

#[doc(hidden)]
impl ScriptCall {
    /// An acquire of group `key` under `token` (any text: the bench passes placeholders).
    pub fn acquire(
        key: &str,
        token: &str,
        holder: &str,
        lease_ms: u64,
        max_leaders: u32,
    ) -> Result<Self, Error> {
        let idle_ms = super::builder::DEFAULT_IDLE_GROUP_TTL.as_millis();
        let keys = GroupKeys::new(key)?;
        Ok(ScriptCall {
            source: ACQUIRE.source,
            args: vec![
                "3".to_owned(),
                keys.group().to_string(),
                keys.full().to_string(),
                keys.preferred().to_string(),
                token.to_owned(),
                holder.to_owned(),
                lease_ms.to_string(),
                max_leaders.to_string(),
                keys.grant_channel().to_string(),
                (u128::from(lease_ms) + idle_ms).to_string(),
                String::new(),
            ],
        })
    }

    /// A release of group `key` under `token`.
    pub fn release(key: &str, token: &str, min_lease_ms: u64) -> Result<Self, Error> {
        let keys = GroupKeys::new(key)?;
        Ok(ScriptCall {
            source: RELEASE.source,
            args: vec![
                "2".to_owned(),
                keys.group().to_string(),
                keys.full().to_string(),
                token.to_owned(),
                min_lease_ms.to_string(),
                keys.release_channel().to_string(),
            ],
        })
    }
}
