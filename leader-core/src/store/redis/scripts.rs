//! The Lua scripts, and the keys and channel a group's scripts use.

use std::fmt;
use std::sync::LazyLock;

use redis::{RedisWrite, Script, ToRedisArgs};

use crate::error::Error;
use crate::token::LeaseToken;

/// One script, by the SHA1 that EVALSHA names and the source that EVAL sends on NOSCRIPT.
pub(crate) struct LuaScript {
    pub name: &'static str,
    /// Its place among [`SCRIPT_COUNT`] scripts, for per-script state of a store.
    pub index: usize,
    pub source: &'static str,
    pub hash: String,
}

/// Each script is declared with a shebang (Redis 7), so the server knows before it runs
/// whether it may write: a replica rejects a writing script whole with `READONLY` (which
/// the store treats as transient and retries on a new connection) instead of answering
/// from its own, possibly stale, copy ("not held" to a healthy leader, "full" from a
/// refusal whose writes failed quietly). The writing scripts carry `allow-oom`: their
/// writes are a few bytes per slot, so a server out of memory still grants, renews and
/// releases. `state`, `state_many`, `claim` and `preference` carry `no-writes`, so they also answer on a replica.
macro_rules! lua_script {
    ($name:literal, $index:literal, $shebang:literal) => {
        lua_script!($name, $index, $shebang, "")
    };
    // `$first`: a part of the script that runs before the prelude (acquire's refusal of a
    // group known to be full, which then defines none of the prelude's functions).
    ($name:literal, $index:literal, $shebang:literal, $first:expr) => {
        LazyLock::new(|| {
            let source = concat!(
                $shebang,
                "\n",
                include_str!("full_marker.lua"),
                $first,
                "\n",
                include_str!("prelude.lua"),
                "\n",
                include_str!(concat!($name, ".lua"))
            );
            let hash = Script::new(source).get_hash().to_owned();
            LuaScript { name: $name, index: $index, source, hash }
        })
    };
}

/// How many scripts there are.
pub(crate) const SCRIPT_COUNT: usize = 11;
pub(crate) static ACQUIRE: LazyLock<LuaScript> =
    lua_script!("acquire", 0, "#!lua flags=allow-oom", include_str!("acquire_refusal.lua"));
pub(crate) static RENEW: LazyLock<LuaScript> = lua_script!("renew", 1, "#!lua flags=allow-oom");
pub(crate) static RELEASE: LazyLock<LuaScript> = lua_script!("release", 2, "#!lua flags=allow-oom");
pub(crate) static STATE: LazyLock<LuaScript> = lua_script!("state", 3, "#!lua flags=no-writes");
pub(crate) static WATCH: LazyLock<LuaScript> = lua_script!("watch", 4, "#!lua flags=allow-oom");
pub(crate) static REVOKE: LazyLock<LuaScript> = lua_script!("revoke", 5, "#!lua flags=allow-oom");
pub(crate) static RENEW_MANY: LazyLock<LuaScript> =
    lua_script!("renew_many", 6, "#!lua flags=allow-oom");
pub(crate) static STATE_MANY: LazyLock<LuaScript> =
    lua_script!("state_many", 7, "#!lua flags=no-writes");
pub(crate) static CLAIM: LazyLock<LuaScript> = lua_script!("claim", 8, "#!lua flags=no-writes");
pub(crate) static PREFER: LazyLock<LuaScript> = lua_script!("prefer", 9, "#!lua flags=allow-oom");
pub(crate) static PREFERENCE: LazyLock<LuaScript> =
    lua_script!("preference", 10, "#!lua flags=no-writes");

/// The Redis keys and channels of one group. The keys share the hash tag `{key}`, so a
/// Cluster keeps them on one slot. They are written straight into each command, so a call
/// builds no strings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupKeys<'a> {
    key: &'a str,
}

impl<'a> GroupKeys<'a> {
    /// The keys of group `key`, which must not contain braces (they would break the tag).
    pub(crate) fn new(key: &'a str) -> Result<Self, Error> {
        if key.contains(['{', '}']) {
            return Err(Error::InvalidKey {
                key: key.to_owned(),
                reason: "must not contain `{` or `}`: the Redis store wraps each group key in a \
                         hash tag of its own"
                    .to_owned(),
            });
        }
        Ok(GroupKeys { key })
    }

    /// The slots, `max_leaders`, the last fence and whether a candidate may be waiting or a
    /// tool watching, in one hash: `{key}:group`.
    pub(crate) fn group(self) -> Named<'a> {
        Named { before: "{", key: self.key, after: "}:group" }
    }

    /// Marks the group full until just before its nearest expiry: `{key}:full`.
    pub(crate) fn full(self) -> Named<'a> {
        Named { before: "{", key: self.key, after: "}:full" }
    }

    /// The holder an operator prefers for the group, while the preference lives:
    /// `{key}:preferred`.
    pub(crate) fn preferred(self) -> Named<'a> {
        Named { before: "{", key: self.key, after: "}:preferred" }
    }

    /// The channel a release is published on (while a candidate may wait, or a tool watches).
    pub(crate) fn release_channel(self) -> Named<'a> {
        Named { before: RELEASE_CHANNEL_PREFIX, key: self.key, after: "" }
    }

    /// The channel a new grant is published on (while a tool watches).
    pub(crate) fn grant_channel(self) -> Named<'a> {
        Named { before: GRANT_CHANNEL_PREFIX, key: self.key, after: "" }
    }
}

/// A key or channel name made of a group key and fixed text around it; as a command
/// argument it is written into the command's buffer directly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Named<'a> {
    before: &'static str,
    key: &'a str,
    after: &'static str,
}

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{}", self.before, self.key, self.after)
    }
}

impl ToRedisArgs for Named<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(self);
    }
}

/// A token as a command argument: its 32 hex digits, without a string in between.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenArg(pub LeaseToken);

impl ToRedisArgs for TokenArg {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(self.0);
    }
}

/// The prefix of every release channel; the store's hub subscribes to `leader:released:*`.
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "leader:released:";

/// The prefix of every grant channel, for tools that watch a group change.
pub(crate) const GRANT_CHANNEL_PREFIX: &str = "leader:granted:";
