//! A group announced as watched: while an announcement of it is live, its grants and
//! releases are published. A tool's announcement and this store's observers' are kept apart,
//! each under this store's random watcher id.

use std::time::Duration;

use super::RedisStore;
use super::scripts::{GroupKeys, WATCH};
use crate::duration::ceil_millis as millis;
use crate::error::Error;
use crate::token::LeaseToken;

impl RedisStore {
    /// Has the group's grants and releases published for the next `duration`, as a
    /// [`GroupObserver`](crate::GroupObserver) of this store has them published while it
    /// lives; for the tests of the announcement and for a program that subscribes to the
    /// group's [channels](RedisGroupLayout) itself. Not a stable API: watch a group with a
    /// `GroupObserver` (or `leader watch`). Without an announcement a grant publishes
    /// nothing, and a release only when a refused candidate may be waiting. `duration`
    /// must be between 1 ms and one day. Each store announces for itself: an announcement
    /// never shortens another store's, and [`withdraw_watcher`](Self::withdraw_watcher)
    /// withdraws only this store's (a `GroupObserver`'s announcement is its own, apart from
    /// this one).
    #[doc(hidden)]
    pub async fn announce_watcher(&self, key: &str, duration: Duration) -> Result<(), Error> {
        if duration < Duration::from_millis(1) || duration > Duration::from_secs(86_400) {
            return Err(Error::invalid_option(
                "duration",
                duration,
                "must be between 1ms and 1 day",
            ));
        }
        self.watch_script(key, millis(duration), "tool").await
    }

    /// Withdraws this store's [announcement](Self::announce_watcher) of group `key`: once no
    /// other store's is live, the group's grants are no longer published. Not a stable API.
    #[doc(hidden)]
    pub async fn withdraw_watcher(&self, key: &str) -> Result<(), Error> {
        self.watch_script(key, 0, "tool").await
    }

    /// This store's observers' announcement of `key` for `duration` (zero: withdrawn), kept
    /// apart from a tool's ([`announce_watcher`](Self::announce_watcher)).
    pub(super) async fn observe_announcement(
        &self,
        key: &str,
        duration: Duration,
    ) -> Result<(), Error> {
        self.watch_script(key, millis(duration), "observers").await
    }

    async fn watch_script(&self, key: &str, duration_ms: u64, who: &str) -> Result<(), Error> {
        let keys = GroupKeys::new(key)?;
        let id = format!("{}:{who}", self.watcher_id()?);
        self.call(
            "watch",
            key,
            &WATCH,
            &[&keys.group()],
            &[&duration_ms, &self.inner.idle_group_ttl_ms, &id],
        )
        .await?;
        Ok(())
    }

    /// This store's id in the groups it announces: random, made once.
    fn watcher_id(&self) -> Result<&str, Error> {
        if let Some(id) = self.inner.watcher_id.get() {
            return Ok(id);
        }
        let id = LeaseToken::generate()?.to_string();
        Ok(self.inner.watcher_id.get_or_init(|| id))
    }
}
