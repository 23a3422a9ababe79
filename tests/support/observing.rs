//! Helpers for the observation suites: stores as separate processes have them, an
//! observer's next change, a slot taken, and a layer that counts reads and watches.

use std::time::Duration;

use leader::store::SharedStore;
use leader::{GroupObserver, LeaderGroupState, LeaseStore, LeaseToken};
use tokio::time::timeout;

use super::{granted_fence, request_for};

/// The observed group's store key.
pub const KEY: &str = "leader:observed";

const SECOND: Duration = Duration::from_secs(1);

/// Three stores on one server, each with its own connections: what three processes have.
pub async fn stores(url: &str) -> [SharedStore; 3] {
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(leader::store::connect(url).await.expect("connect"));
    }
    stores.try_into().unwrap()
}

pub fn holders(state: &LeaderGroupState) -> Vec<(String, u64)> {
    state.leaders.iter().map(|slot| (slot.holder.clone(), slot.fence)).collect()
}

/// Counts the state reads and group watches made through it.
#[derive(Debug, Default)]
pub struct Calls {
    pub reads: std::sync::atomic::AtomicUsize,
    pub watches: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl leader::store::author::StoreLayer for Calls {
    async fn state(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
    ) -> Result<leader::store::GroupSnapshot, leader::Error> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        inner.state(key).await
    }

    async fn watch_changes(
        &self,
        inner: &dyn LeaseStore,
        key: &str,
    ) -> Result<leader::store::author::GroupWatch, leader::Error> {
        self.watches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        inner.watch_changes(key).await
    }
}

/// The observer's next change, within 5 s.
pub async fn next(observer: &mut GroupObserver) -> Vec<(String, u64)> {
    let state = timeout(5 * SECOND, observer.changed()).await.expect("a change in 5 s");
    holders(&state.expect("the store answers"))
}

/// Slot `token` of the observed group for `holder`, living `lease`: its fence.
pub async fn take(
    store: &SharedStore,
    holder: &'static str,
    held: LeaseToken,
    lease: Duration,
) -> u64 {
    let mut request = request_for(KEY, 1, held, lease);
    request.holder = holder;
    granted_fence(store.acquire(request).await.unwrap())
}
