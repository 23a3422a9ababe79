//! Running one script for an operation: one deadline over the call, its retry on a new
//! connection after a stale one, and the reading of the server's error (a wrong-type key is
//! described by what the group's keys hold).

use std::time::Duration;

use super::RedisStore;
use super::connection::{CallFailure, ToRedisArgsDyn};
use super::failures::{class, connect_failure, unavailable};
use super::scripts::{GroupKeys, LuaScript};
use crate::duration::ceil_millis as millis;
use crate::error::Error;
use crate::store::bound::{Failed, Then};
use crate::store::class::Class;

impl RedisStore {
    /// Runs one script for `operation` on group `key`, within the command timeout.
    pub(super) async fn call(
        &self,
        operation: &'static str,
        key: &str,
        lua: &LuaScript,
        keys: &[&dyn ToRedisArgsDyn],
        args: &[&dyn ToRedisArgsDyn],
    ) -> Result<redis::Value, Error> {
        self.call_then_wait(operation, key, lua, keys, args, None).await.map(|(value, _)| value)
    }

    /// [`call`](Self::call), with `WAIT replicas timeout` in the same round trip if given.
    pub(super) async fn call_then_wait(
        &self,
        operation: &'static str,
        key: &str,
        lua: &LuaScript,
        keys: &[&dyn ToRedisArgsDyn],
        args: &[&dyn ToRedisArgsDyn],
        wait: Option<(u32, Duration)>,
    ) -> Result<(redis::Value, Option<i64>), Error> {
        let wait = wait.map(|(replicas, timeout)| (replicas, millis(timeout)));
        let limit = self.command_timeout()
            + wait.map_or(Duration::ZERO, |(_, ms)| Duration::from_millis(ms));
        // One deadline for the whole operation: the call, its one retry on a new
        // connection after a stale one, and the diagnosis of a wrong-type key.
        let bound = self.bound(operation, limit);
        let call = bound.retry(Duration::ZERO, |tries| async move {
            match self.inner.connections.eval_then_wait(lua, keys, args, wait).await {
                Ok(reply) => Ok(reply),
                Err(CallFailure::Stale(error)) if tries.made == 0 => {
                    tracing::warn!(script = lua.name, %error, "stale Redis connection; retrying on a new one");
                    Err(Failed { error: unavailable(operation, error), then: Then::AtOnce })
                }
                Err(CallFailure::Redis(error) | CallFailure::Stale(error)) => {
                    Err(Failed::stop(self.classify(operation, key, error).await))
                }
                Err(failure) => Err(Failed::stop(connect_failure(operation, failure))),
            }
        });
        bound.run(call).await.unwrap_or_else(|timed_out| {
            // A black-holed connection never answers: replace it.
            self.inner.connections.discard_current();
            Err(timed_out)
        })
    }

    async fn classify(
        &self,
        operation: &'static str,
        key: &str,
        error: redis::RedisError,
    ) -> Error {
        if error.code() == Some("WRONGTYPE") {
            let found = Box::pin(self.describe_types(key)).await; // rare: kept out of every call's future
            return Error::WrongType { key: key.to_owned(), found };
        }
        match class(&error) {
            Class::Permanent => Error::Store {
                store: "redis",
                endpoint: String::new(),
                operation,
                message: error.to_string(),
            },
            Class::Retry | Class::Unavailable => unavailable(operation, error),
        }
    }

    /// What the group's keys hold, for a wrong-type error: `{k}:group is a string, …`.
    async fn describe_types(&self, key: &str) -> String {
        let mut found = Vec::new();
        let keys = GroupKeys::new(key)
            .map(|keys| [keys.group(), keys.full(), keys.preferred()].map(|k| k.to_string()));
        if let (Ok(keys), Ok((_, mut connection, _))) = (keys, self.inner.connections.get().await) {
            for key in &keys {
                let kind: Result<String, _> =
                    redis::cmd("TYPE").arg(key).query_async(&mut connection).await;
                if let Ok(kind) = kind {
                    found.push(format!("{key} is a {kind}"));
                }
            }
        }
        if found.is_empty() { "a value of another type".to_owned() } else { found.join(", ") }
    }
}
