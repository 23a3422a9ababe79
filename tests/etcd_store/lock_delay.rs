//! The lock-delay after a takeover: a slot taken from a holder that may still act waits out
//! the holder's deadline, and is pending, not a leader, meanwhile.

use std::time::Duration;

use leader::store::etcd_client::{self, GetOptions};
use leader::store::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use leader::{EtcdStore, LeaseStore};
use tokio::time::{Instant, timeout};

use super::SECOND;
use crate::support;
use crate::support::etcd_store::solo;
use crate::support::{granted_fence, request_for, token};

#[tokio::test]
async fn a_slot_taken_over_from_a_holder_that_never_released_waits_one_ttl() {
    let (store, _server) = solo().await;
    let key = "leader:takeover";
    let fence = granted_fence(store.acquire(request_for(key, 1, token(), SECOND)).await.unwrap());
    // The holder vanishes without a release; its lease expires within about 1.5 s.
    let started = Instant::now();
    let mut next = token();
    let taken = loop {
        match store.acquire(request_for(key, 1, next, 2 * SECOND)).await.unwrap() {
            AcquireOutcome::Granted(grant) => break grant,
            AcquireOutcome::Full { .. } => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("{other:?}"),
        }
        next = token();
    };
    assert!(taken.fence > fence);
    // The grant came back only after the old holder's TTL (1 s) had passed since the slot
    // was free: at least 1 s of expiry plus 1 s of lock-delay.
    assert!(started.elapsed() >= 2 * SECOND, "returned after {:?}", started.elapsed());
    // Renewed during the delay: still held, with its full lease ahead.
    assert!(taken.expires_in >= 2 * SECOND - Duration::from_millis(100), "{taken:?}");
    assert!(matches!(
        store.renew(key, next, 2 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));

    // A release hands over at once: no lock-delay.
    store.release(key, next, Duration::ZERO).await.unwrap();
    let started = Instant::now();
    granted_fence(store.acquire(request_for(key, 1, token(), 2 * SECOND)).await.unwrap());
    assert!(started.elapsed() < SECOND / 2, "a released slot waited {:?}", started.elapsed());
}

/// Waits for a grant of `key` (a group of one) under a new token, retrying a full group
/// every 50 ms; the grant and its token.
async fn granted_when_free(
    store: &EtcdStore,
    key: &str,
    lease: Duration,
) -> (leader::store::Grant, leader::LeaseToken) {
    let next = token();
    loop {
        match store.acquire(request_for(key, 1, next, lease)).await.unwrap() {
            AcquireOutcome::Granted(grant) => return (grant, next),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A release by a process that was not granted the slot (another store, with the holder's
/// token, as `leader release` from an operator's shell does) keeps the lock-delay: the
/// holder's next renewal is refused, and nobody else is granted the slot before the
/// holder's deadline has passed.
#[tokio::test]
async fn a_release_by_another_process_keeps_the_lock_delay() {
    let (holder, server) = solo().await;
    let lease = 3 * SECOND;
    let key = "leader:released-by-another";
    let held = token();
    let sent = Instant::now();
    granted_fence(holder.acquire(request_for(key, 1, held, lease)).await.unwrap());
    let operator = EtcdStore::connect(&server.url()).await.unwrap();
    // Even one that renewed the slot first (which a token's other holder may do): renewing
    // it does not make its release the grantee's own.
    let renewed = operator.renew(key, held, lease).await.unwrap();
    assert!(matches!(renewed, RenewOutcome::Renewed { .. }), "{renewed:?}");
    let released = operator.release(key, held, Duration::ZERO).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Kept { .. }), "{released:?}");
    assert_eq!(holder.renew(key, held, lease).await.unwrap(), RenewOutcome::NotHeld);
    let third = EtcdStore::connect(&server.url()).await.unwrap();
    timeout(20 * SECOND, granted_when_free(&third, key, lease)).await.expect("granted in the end");
    assert!(sent.elapsed() >= lease, "granted {:?} after the holder's request", sent.elapsed());
}

/// A group of one whose holder's lease was revoked early is not grown beside it: its holder
/// believes it is alone until its deadline, so a grant under a larger size waits it out
/// (elsewhere the larger size is refused while the slot lives).
#[tokio::test]
async fn growing_a_group_waits_for_a_holder_that_believes_it_is_alone() {
    let (store, server) = solo().await;
    let key = "leader:grown";
    let lease = 3 * SECOND;
    granted_fence(store.acquire(request_for(key, 1, token(), lease)).await.unwrap());
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let slots =
        client.get(format!("{key} slot "), Some(GetOptions::new().with_prefix())).await.unwrap();
    client.lease_revoke(slots.kvs()[0].lease()).await.unwrap();
    let revoked_at = Instant::now();
    let other = EtcdStore::connect(&server.url()).await.unwrap();
    let grown = timeout(20 * SECOND, other.acquire(request_for(key, 3, token(), lease))).await;
    assert!(matches!(grown, Ok(Ok(AcquireOutcome::Granted(_)))), "{grown:?}");
    assert!(
        revoked_at.elapsed() >= lease - Duration::from_millis(100),
        "{:?}",
        revoked_at.elapsed()
    );
}

/// A grant under a new size waits for the holders the new size leaves out: a holder of
/// index 3 of a group of 4 whose lease was revoked early may still act, so a group of 1
/// taken meanwhile waits its TTL before it is acted on.
#[tokio::test]
async fn a_change_of_size_waits_for_every_holder_that_may_still_act() {
    let (store, server) = solo().await;
    let key = "leader:resized";
    let lease = 3 * SECOND;
    for _ in 0..4 {
        granted_fence(store.acquire(request_for(key, 4, token(), lease)).await.unwrap());
    }
    // Every slot but the one of index 3 is released; that one has its lease revoked behind
    // its holder's back (as a resumed, stale Raft leader does).
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let slots =
        client.get(format!("{key} slot "), Some(GetOptions::new().with_prefix())).await.unwrap();
    let mut last = None;
    for kv in slots.kvs() {
        let name = String::from_utf8_lossy(kv.key()).into_owned();
        let value = String::from_utf8_lossy(kv.value()).into_owned();
        let held: leader::LeaseToken = value.split(' ').next().unwrap().parse().unwrap();
        if name.ends_with(" 3") {
            last = Some(kv.lease());
        } else {
            assert_eq!(
                store.release(key, held, Duration::ZERO).await.unwrap(),
                ReleaseOutcome::Released
            );
        }
    }
    client.lease_revoke(last.expect("index 3 was granted")).await.unwrap();
    let revoked_at = Instant::now();
    let (grant, _) = timeout(20 * SECOND, granted_when_free(&store, key, lease)).await.unwrap();
    assert!(grant.fence > 0);
    assert!(
        revoked_at.elapsed() >= lease - Duration::from_millis(100),
        "a group of one acted on {:?} after the revocation",
        revoked_at.elapsed()
    );
}

/// During a takeover's lock-delay the new slot is pending: `state()` and observers in other
/// stores never name its candidate as a leader until the delay is over (the slot is then
/// confirmed, and the grant returns at once); then they do. A candidate dropped during the
/// delay leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_in_its_lock_delay_is_pending_not_a_leader() {
    let (store, server) = solo().await;
    let key = "leader:pending";
    let lease = 2 * SECOND;
    granted_fence(store.acquire(request_for(key, 1, token(), lease)).await.unwrap());
    // The holder vanishes without a release; a candidate on another store takes over.
    let watcher: leader::store::SharedStore =
        std::sync::Arc::new(EtcdStore::connect(&server.url()).await.unwrap());
    let keys = leader::KeyOptions::new().exact_key(key);
    let observer =
        leader::GroupObserver::start_with_keys(&watcher, "pending", &keys).await.unwrap();
    let taker = |store: EtcdStore| async move {
        let held = token();
        loop {
            let mut request = request_for(key, 1, held, lease);
            request.holder = "taker";
            match store.acquire(request).await.unwrap() {
                AcquireOutcome::Granted(grant) => return (grant, store),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    };
    let mut taking = tokio::spawn(taker(EtcdStore::connect(&server.url()).await.unwrap()));
    let names_taker = |slots: &[leader::SlotInfo]| slots.iter().any(|slot| slot.holder == "taker");
    let mut saw_pending = false;
    let (grant, candidate) = loop {
        let (state, current) = (watcher.state(key).await.unwrap(), observer.current());
        if taking.is_finished() {
            break taking.await.unwrap();
        }
        if names_taker(&state.leaders) || names_taker(&current.leaders) {
            // Read between the slot's confirmation and the grant's return: the grant is on
            // its way back. Named a leader during the delay (2 s), it would not be.
            match timeout(Duration::from_millis(500), &mut taking).await {
                Ok(taken) => break taken.unwrap(),
                Err(_) => panic!("a pending slot was named a leader: {state:?}, {current:?}"),
            }
        }
        saw_pending |= names_taker(&state.pending);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(saw_pending, "the takeover's slot was never seen pending");
    let after = watcher.state(key).await.unwrap();
    assert_eq!(after.leaders.iter().map(|slot| slot.fence).collect::<Vec<_>>(), [grant.fence]);
    assert!(after.pending.is_empty());

    // A candidate dropped during its delay leaves nothing behind it.
    let revoked = watcher
        .revoke(
            key,
            leader::store::SlotRef::Fence(grant.fence),
            leader::store::Revocation::AtExpiry,
        )
        .await
        .unwrap();
    assert!(matches!(revoked, ReleaseOutcome::Kept { .. }), "{revoked:?}");
    drop(candidate);
    let quitter = EtcdStore::connect(&server.url()).await.unwrap();
    let dropped = timeout(SECOND, quitter.acquire(request_for(key, 1, token(), lease))).await;
    assert!(dropped.is_err(), "granted during its lock-delay: {dropped:?}");
    support::eventually(5 * SECOND, "the abandoned slot is gone", || async {
        let state = watcher.state(key).await.unwrap();
        state.leaders.is_empty() && state.pending.is_empty()
    })
    .await;
}
