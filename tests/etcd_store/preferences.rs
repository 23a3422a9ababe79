//! Who a leader steps down for, on etcd: a replaced or withdrawn preference's lease is
//! revoked (it would otherwise live out the preference's time, holding nothing), and
//! another's lease under the key is left alone; a claim whose candidate stopped asking is
//! not stepped down for while its lease lives, and a candidate that keeps asking is.

use std::time::Duration;

use leader::store::etcd_client;
use leader::{KeyOptions, Leadership, LeadershipOptions, LeaseStore};
use tokio::time::{Instant, sleep};

use super::SECOND;
use crate::support::etcd_store::solo;
use crate::support::{request, token};

/// The ids of the cluster's leases granted for `ttl` seconds.
async fn leases_of(client: &mut etcd_client::Client, ttl: i64) -> Vec<i64> {
    let mut found = Vec::new();
    for lease in client.leases().await.unwrap().leases() {
        let life = client.lease_time_to_live(lease.id(), None).await.unwrap();
        if life.granted_ttl() == ttl && life.ttl() > 0 {
            found.push(lease.id());
        }
    }
    found
}

#[tokio::test]
async fn a_replaced_or_withdrawn_preference_gives_its_lease_back() {
    let (store, server) = solo().await;
    let key = "leader:preferred";
    let hour = Duration::from_secs(3600);
    let mut client = etcd_client::Client::connect([server.member.endpoint()], None).await.unwrap();
    store.prefer(key, Some(("web-1", hour))).await.unwrap();
    store.prefer(key, Some(("web-2", hour))).await.unwrap();
    // (Revoked behind the call, without waiting.)
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(leases_of(&mut client, 3600).await.len(), 1, "the replaced one's lease is gone");
    store.prefer(key, None).await.unwrap();
    assert_eq!(store.preference(key).await.unwrap(), None);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(leases_of(&mut client, 3600).await, Vec::<i64>::new(), "the withdrawn one's too");

    // Another's lease, with a key of its own, under a value this store did not write.
    let theirs = client.lease_grant(3600, None).await.unwrap().id();
    let on_theirs = etcd_client::PutOptions::new().with_lease(theirs);
    client.put("their-key", "x", Some(on_theirs.clone())).await.unwrap();
    client.put("leader:preferred preferred", "not ours", Some(on_theirs)).await.unwrap();
    assert_eq!(store.preference(key).await.unwrap(), None, "another's value is no preference");
    store.prefer(key, Some(("web-3", hour))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(client.get("their-key", None).await.unwrap().kvs().len(), 1, "their lease lives");
    assert_eq!(store.preference(key).await.unwrap().map(|p| p.holder).as_deref(), Some("web-3"));
    // A time beyond the store's range, or no holder, is no preference (the first was one
    // for three million years).
    for value in ["99999999999999999 p1", "18446744073709551615 x", "99999999999999 "] {
        client.put("leader:preferred preferred", value, None).await.unwrap();
        assert_eq!(store.preference(key).await.unwrap(), None, "{value:?}");
    }
}

/// The leader read a claim's time left as its lease's granted TTL, so a claim nobody kept
/// alive looked alive at every read, and the leader stepped down for a candidate that had
/// stopped asking while the claim's lease lived on. It reads the lease's time to live now.
#[tokio::test]
async fn a_claim_nobody_keeps_alive_moves_no_leader_while_its_lease_lives() {
    let (store, _server) = solo().await;
    let key = "leader:kept-claims";
    let role = |id: &str, priority| {
        let options = LeadershipOptions::new()
            .keys(KeyOptions::new().exact_key(key))
            .holder_id(id)
            .lease_time(10 * SECOND)
            .priority(priority)
            .step_down_delay(SECOND);
        Leadership::start("kept-claims", store.clone(), options)
    };
    let low = role("low", 1).await.unwrap();
    let began = Instant::now();
    while !low.is_leader() {
        assert!(began.elapsed() < 10 * SECOND, "the only candidate never led");
        sleep(Duration::from_millis(20)).await;
    }
    let fence = low.fence();
    // One attempt of a candidate of priority 100 that then stops asking: its claim's lease
    // (of its 8 s hold) lives on.
    let once = request(key, 1, token()).reserving_at(Duration::ZERO, 8 * SECOND, 100);
    store.acquire(once).await.unwrap();
    assert_eq!(store.claim(key).await.unwrap().expect("the claim").priority, 100);
    sleep(5 * SECOND).await;
    assert_eq!(low.fence(), fence, "stepped down for a candidate that stopped asking");
    // Once it lapsed, a better candidate that keeps asking is stepped down for.
    let high = role("high", 5).await.unwrap();
    let began = Instant::now();
    while !high.is_leader() {
        assert!(began.elapsed() < 15 * SECOND, "the better candidate never led");
        sleep(Duration::from_millis(20)).await;
    }
    assert!(!low.is_leader());
    for leadership in [high, low] {
        leadership.stop().await.unwrap();
    }
}
