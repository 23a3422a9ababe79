//! The Lua scripts, and the keys and channel a group's scripts use.

use std::sync::LazyLock;

use redis::Script;

use crate::Error;

/// One script, by the SHA1 that EVALSHA names and the source that EVAL sends on NOSCRIPT.
pub(crate) struct LuaScript {
    pub name: &'static str,
    pub source: &'static str,
    pub hash: String,
}

macro_rules! lua_script {
    ($name:literal) => {
        LazyLock::new(|| {
            let source =
                concat!(include_str!("prelude.lua"), "\n", include_str!(concat!($name, ".lua")));
            LuaScript { name: $name, source, hash: Script::new(source).get_hash().to_owned() }
        })
    };
}

pub(crate) static ACQUIRE: LazyLock<LuaScript> = lua_script!("acquire");
pub(crate) static RENEW: LazyLock<LuaScript> = lua_script!("renew");
pub(crate) static RELEASE: LazyLock<LuaScript> = lua_script!("release");
pub(crate) static STATE: LazyLock<LuaScript> = lua_script!("state");

/// The prefix of every release channel; the store's hub subscribes to `leader:released:*`.
pub const RELEASE_CHANNEL_PREFIX: &str = "leader:released:";

/// The Redis keys of one group, both under the hash tag `{key}` so a Cluster keeps them on
/// one slot.
pub(crate) struct GroupKeys {
    /// The slots, `max_leaders` and the last fence, in one hash.
    pub group: String,
    /// The last fence, without a TTL.
    pub fence: String,
}

impl GroupKeys {
    /// The keys of group `key`, which must not contain braces (they would break the tag).
    pub(crate) fn new(key: &str) -> Result<Self, Error> {
        if key.contains(['{', '}']) {
            return Err(Error::InvalidKey {
                key: key.to_owned(),
                reason: "must not contain `{` or `}`: the Redis store wraps each group key in a \
                         hash tag of its own"
                    .to_owned(),
            });
        }
        Ok(GroupKeys { group: format!("{{{key}}}:group"), fence: format!("{{{key}}}:fence") })
    }
}

/// The channel a release of group `key` is published on.
pub(crate) fn release_channel(key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{key}")
}

/// The prefix of every grant channel, for tools that watch a group change.
pub const GRANT_CHANNEL_PREFIX: &str = "leader:granted:";

/// The channel a new grant of group `key` is published on.
pub(crate) fn grant_channel(key: &str) -> String {
    format!("{GRANT_CHANNEL_PREFIX}{key}")
}
