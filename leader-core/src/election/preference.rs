//! An operator's preference for the holder that is to lead a group, through a
//! [`LeaderGroupElector`]: the call that Kubernetes' controllers make by setting a Lease's
//! `preferredHolder`, here a record in the store with a time to live.

use std::time::Duration;

use super::group::LeaderGroupElector;
use crate::error::Error;
use crate::holder::check_holder_id;
use crate::store::Preference;
use crate::telemetry;

impl LeaderGroupElector {
    /// Asks for `holder` to lead group `name` for the next `ttl`: its claim on the group's
    /// next free slot goes before every other candidate's, whatever their priorities, and a
    /// [`Leadership`](crate::Leadership) leader with a
    /// [priority](crate::LeadershipOptions::priority) steps down for it once it waits (after
    /// the leader's `step_down_delay`, as for a better priority), while the preferred
    /// leader itself steps down for nobody. A preference for a holder that never asks moves
    /// nobody; it lapses by itself after `ttl`, and replaces any earlier one of the group.
    /// The candidates that take part are those that announce themselves: `Leadership`
    /// instances with a priority (`priority(0)` will do). One write to the store.
    ///
    /// Fails on a holder id that is not one (empty, over
    /// [`MAX_HOLDER_LEN`](crate::MAX_HOLDER_LEN) bytes, control characters), a `ttl` under
    /// a millisecond or beyond the store's range, and on a store that keeps no claims
    /// ([`Error::Unsupported`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_core::{LeaderGroupElectionOptions, LeaderGroupElector, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
    /// let elector = LeaderGroupElector::new(MemoryStore::new(), LeaderGroupElectionOptions::new(1))?;
    /// elector.prefer("report", "web-2", Duration::from_secs(600)).await?;
    /// assert_eq!(elector.preference("report").await?.unwrap().holder, "web-2");
    /// elector.clear_preference("report").await?;
    /// assert_eq!(elector.preference("report").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn prefer(&self, name: &str, holder: &str, ttl: Duration) -> Result<(), Error> {
        check_holder_id(holder)?;
        let ttl = crate::duration::positive("preference ttl", ttl)?;
        let key = self.settings.keys.resolve(name)?;
        telemetry::prefer(&*self.store, &key, Some((holder, ttl))).await
    }

    /// Withdraws any preference for group `name` ([`prefer`](Self::prefer)): the leader
    /// stays, and the candidates' claims go by priority again. One write to the store.
    pub async fn clear_preference(&self, name: &str) -> Result<(), Error> {
        let key = self.settings.keys.resolve(name)?;
        telemetry::prefer(&*self.store, &key, None).await
    }

    /// The live preference for group `name`: the preferred holder and the time until it
    /// lapses, or `None`. One read of the store.
    pub async fn preference(&self, name: &str) -> Result<Option<Preference>, Error> {
        let key = self.settings.keys.resolve(name)?;
        telemetry::preference(&*self.store, &key).await
    }
}
