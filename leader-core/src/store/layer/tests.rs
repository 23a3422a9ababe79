//! The layer's forwarding, against the memory store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::store::{DisabledStore, Grant, MemoryStore};

/// A layer that changes nothing.
#[derive(Debug, Default)]
struct Nothing;
impl StoreLayer for Nothing {}

/// A layer that counts every call it sees.
#[derive(Debug, Default)]
struct Calls(AtomicUsize);

#[async_trait]
impl StoreLayer for Calls {
    async fn state(&self, inner: &dyn LeaseStore, key: &str) -> Result<GroupSnapshot, Error> {
        self.0.fetch_add(1, Ordering::Relaxed);
        inner.state(key).await
    }
}

fn request(key: &str, token: LeaseToken) -> AcquireRequest<'_> {
    let one = std::num::NonZeroU32::MIN;
    AcquireRequest::new(key, one, token, "me", Duration::from_secs(60))
}

#[test]
fn what_a_store_says_of_itself_goes_through() {
    let disabled = Layered::new(Nothing, DisabledStore);
    assert!(!disabled.coordinates(), "a wrapped DisabledStore still coordinates nothing");
    assert_eq!(disabled.kind(), "disabled");
    assert!(Layered::new(Nothing, MemoryStore::new()).coordinates());
}

#[tokio::test(start_paused = true)]
async fn every_call_reaches_the_wrapped_store() {
    let memory = MemoryStore::new();
    let store = Layered::new(Nothing, Layered::new(Nothing, memory.clone()));
    let (key, token) = ("leader:layered", LeaseToken::generate().unwrap());
    let mut changes = store.watch_changes(key).await.unwrap();
    let mut releases = store.watch_releases(key).await.unwrap();
    let AcquireOutcome::Granted(Grant { fence, .. }) =
        store.acquire(request(key, token)).await.unwrap()
    else {
        panic!("a free group")
    };
    tokio::time::timeout(Duration::from_secs(1), changes.woken())
        .await
        .expect("the grant woke the change watch");
    assert_eq!(memory.state(key).await.unwrap().leaders[0].fence, fence);
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1);
    assert_eq!(store.list_groups("leader:", "").await.unwrap(), [key]);
    let renewed = store.renew(key, token, Duration::from_secs(60)).await.unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed { .. }), "{renewed:?}");
    let released = store.release(key, token, Duration::ZERO).await.unwrap();
    assert_eq!(released, ReleaseOutcome::Released);
    tokio::time::timeout(Duration::from_secs(1), releases.woken())
        .await
        .expect("the release woke the release watch");
    let other = LeaseToken::generate().unwrap();
    store.acquire(request(key, other)).await.unwrap();
    let revoked = store.revoke(key, SlotRef::Token(other), Revocation::Now).await.unwrap();
    assert_eq!(revoked, ReleaseOutcome::Released);
    assert!(memory.state(key).await.unwrap().leaders.is_empty());
    store.prefer(key, Some(("web-2", Duration::from_secs(60)))).await.unwrap();
    assert_eq!(memory.preference(key).await.unwrap().map(|p| p.holder).as_deref(), Some("web-2"));
    assert_eq!(store.preference(key).await.unwrap().map(|p| p.holder).as_deref(), Some("web-2"));
    store.prefer(key, None).await.unwrap();
    assert_eq!(memory.preference(key).await.unwrap(), None);
}

#[tokio::test]
async fn a_layer_sees_the_calls_it_overrides() {
    let store = Arc::new(Layered::new(Calls::default(), MemoryStore::new()));
    store.state("leader:counted").await.unwrap();
    store.state("leader:counted").await.unwrap();
    assert_eq!(store.layer().0.load(Ordering::Relaxed), 2);
    assert_eq!(store.inner().kind(), "memory");
}

#[tokio::test]
async fn a_shared_layer_is_a_layer() {
    let calls = Arc::new(Calls::default());
    let store = Layered::new(calls.clone(), DisabledStore);
    store.state("leader:shared").await.unwrap();
    assert_eq!(calls.0.load(Ordering::Relaxed), 1);
    assert!(!store.coordinates());
}
