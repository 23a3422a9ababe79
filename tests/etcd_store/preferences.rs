//! An operator's preference on etcd: a replaced or withdrawn preference's lease is revoked
//! (it would otherwise live out the preference's time, holding nothing), and another's
//! lease under the key is left alone.

use std::time::Duration;

use leader::LeaseStore;
use leader::store::etcd_client;

use crate::support::etcd_store::solo;

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
}
