//! Leases and their keep-alive streams: one stream per lease, closed once the lease is let
//! go or a renewal is dropped before its reply; a kept lease revoked behind the store's back
//! is replaced; a renewal under another key leaves the slot's own renewals whole.

use std::time::Duration;

use leader::LeaseStore;
use leader::store::RenewOutcome;
use leader::store::etcd_client;
use tokio::time::timeout;

use super::SECOND;
use crate::support;
use crate::support::etcd_store::solo;
use crate::support::{granted_fence, request, request_for, token};

#[tokio::test]
async fn a_kept_lease_revoked_meanwhile_is_replaced() {
    let (store, server) = solo().await;
    let key = "leader:kept";
    let first = token();
    granted_fence(store.acquire(request(key, 1, first)).await.unwrap());
    store.release(key, first, Duration::ZERO).await.unwrap();
    // The released slot's lease is kept for the next grant (beside the marker lease, of ten
    // TTLs); revoke it behind the store's back.
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    let leases = client.leases().await.unwrap();
    let mut kept = Vec::new();
    for lease in leases.leases() {
        let life = client.lease_time_to_live(lease.id(), None).await.unwrap();
        if life.granted_ttl() < 20 {
            kept.push(lease.id());
        }
    }
    assert_eq!(kept.len(), 1, "one kept lease: {kept:?}");
    client.lease_revoke(kept[0]).await.unwrap();
    // The next grant (which would use it) takes a new lease instead.
    let next = token();
    granted_fence(store.acquire(request(key, 1, next)).await.unwrap());
    assert!(matches!(
        store.renew(key, next, 10 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(store.state(key).await.unwrap().leaders.len(), 1);
}

/// A claim written on a kept lease that was revoked behind the store's back failed with
/// etcd's "requested lease not found", which ended a `Leadership` with a priority for good:
/// the claim now takes a new lease.
#[tokio::test]
async fn a_claim_on_a_kept_lease_revoked_meanwhile_takes_a_new_one() {
    let (store, server) = solo().await;
    let (full, other) = ("leader:claimed-full", "leader:claimed-other");
    granted_fence(store.acquire(request(full, 1, token())).await.unwrap());
    // A released slot of one second leaves a kept lease of the claim's TTL (one second).
    let first = token();
    granted_fence(store.acquire(request_for(other, 1, first, SECOND)).await.unwrap());
    store.release(other, first, Duration::ZERO).await.unwrap();
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    for lease in client.leases().await.unwrap().leases() {
        let life = client.lease_time_to_live(lease.id(), None).await.unwrap();
        if life.granted_ttl() == 1 {
            client.lease_revoke(lease.id()).await.unwrap();
        }
    }
    let waiter = token();
    let claim = request(full, 1, waiter).reserving_at(Duration::ZERO, SECOND, 3);
    let outcome = store.acquire(claim).await.unwrap();
    assert!(matches!(outcome, leader::store::AcquireOutcome::Full { .. }), "{outcome:?}");
    let claim = store.claim(full).await.unwrap().expect("the claim was written");
    assert_eq!(claim.priority, 3);
}

/// Renewals use one keep-alive stream per lease, not one per renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_share_one_keep_alive_stream() {
    let (store, server) = solo().await;
    let streams = || {
        server
            .member
            .metric_with("grpc_server_started_total", "grpc_method=\"LeaseKeepAlive\"")
            .unwrap_or(0.0)
    };
    let before = streams();
    let options = leader::LeaderElectionOptions::new().lease_time(3 * SECOND).auto_extend(true);
    let elector = leader::LeaderElector::new(store, options).unwrap();
    let ran = elector
        .run_if_leader("streamed", |lease| async move {
            tokio::time::sleep(6 * SECOND).await;
            lease.is_lost()
        })
        .await
        .unwrap();
    assert_eq!(ran.elected(), Some(false), "renewed throughout");
    let opened = streams() - before;
    assert!(opened <= 2.0, "{opened} keep-alive streams for one slot's renewals");
}

/// The keep-alive stream of a lease the store let go (a kept lease that expired unused) is
/// closed, not left open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_of_a_lease_let_go_is_closed() {
    let (store, server) = solo().await;
    let metric = |name: &str| {
        server.member.metric_with(name, "grpc_method=\"LeaseKeepAlive\"").unwrap_or(0.0)
    };
    let open = || metric("grpc_server_started_total") - metric("grpc_server_handled_total");
    for round in 0..2 {
        for i in 0..10 {
            let key = format!("leader:let-go-{round}-{i}");
            let held = token();
            granted_fence(store.acquire(request_for(&key, 1, held, 2 * SECOND)).await.unwrap());
            assert!(matches!(
                store.renew(&key, held, 2 * SECOND).await.unwrap(),
                RenewOutcome::Renewed { .. }
            ));
            store.release(&key, held, Duration::ZERO).await.unwrap();
        }
        // The kept leases expire unused; the next round's grants let them go.
        tokio::time::sleep(3 * SECOND).await;
    }
    granted_fence(
        store.acquire(request_for("leader:let-go-last", 1, token(), 2 * SECOND)).await.unwrap(),
    );
    support::eventually(5 * SECOND, "the streams of the leases let go are closed", || async {
        open() <= 10.0
    })
    .await;
}

/// A renewal under another group's key (a caller's mix-up) answers "not held" and leaves
/// the slot's own renewals as they were: the full lease, not a time to live of zero.
#[tokio::test]
async fn a_renewal_under_another_key_leaves_the_slots_own_renewals_whole() {
    let (store, _server) = solo().await;
    let held = token();
    let lease = 10 * SECOND;
    granted_fence(store.acquire(request_for("leader:mine", 1, held, lease)).await.unwrap());
    for other in ["leader:other", "leader:mine-not"] {
        assert_eq!(store.renew(other, held, lease).await.unwrap(), RenewOutcome::NotHeld);
        match store.renew("leader:mine", held, lease).await.unwrap() {
            RenewOutcome::Renewed { expires_in, .. } => {
                assert!(expires_in > lease / 2, "after a renewal under {other}: {expires_in:?}")
            }
            other => panic!("the holder's renewal got {other:?}"),
        }
    }
}

/// A renewal dropped between its keep-alive request and the reply (a caller's timeout while
/// the member is stopped) leaves no stream behind: the next renewal opens a new one, so no
/// reply ever answers the request before it.
#[tokio::test]
async fn a_renewal_dropped_mid_keep_alive_leaves_no_stream_behind() {
    let (store, server) = solo().await;
    let streams = || {
        server
            .member
            .metric_with("grpc_server_started_total", "grpc_method=\"LeaseKeepAlive\"")
            .unwrap_or(0.0)
    };
    let (key, held, lease) = ("leader:dropped-renewal", token(), 3 * SECOND);
    granted_fence(store.acquire(request_for(key, 1, held, lease)).await.unwrap());
    // The lease's stream, opened by this renewal.
    let first = store.renew(key, held, lease).await.unwrap();
    assert!(matches!(first, RenewOutcome::Renewed { .. }), "{first:?}");
    server.member.pause();
    let dropped = timeout(Duration::from_millis(300), store.renew(key, held, lease)).await;
    server.member.resume();
    assert!(dropped.is_err(), "the renewal was to be dropped before its reply: {dropped:?}");
    tokio::time::sleep(Duration::from_millis(200)).await; // the dropped request's reply
    let before = streams();
    let next = store.renew(key, held, lease).await.unwrap();
    assert!(matches!(next, RenewOutcome::Renewed { .. }), "{next:?}");
    assert_eq!(streams() - before, 1.0, "the next renewal opens a stream of its own");
}
