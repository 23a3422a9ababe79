//! What `RedisStore` publishes on a real `redis-server`: nothing for a cycle nobody waits
//! for, a release or shortening renewal while a candidate may wait, grants while a tool
//! watches.

mod support;

use std::time::Duration;

use leader::store::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use leader::{LeaseStore, RedisStore};
use support::redis::{commands_inside_scripts, counts, group_key, standalone};
use support::{granted_fence, request, request_for, token};
use tokio::time::{sleep, timeout};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_cycle_nobody_waits_for_or_watches_publishes_nothing() {
    let (store, server) = standalone().await;
    let key = "leader:quiet";
    let warm = token(); // the scripts loaded
    granted_fence(store.acquire(request(key, 1, warm)).await.unwrap());
    store.release(key, warm, Duration::ZERO).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..10 {
        let held = token();
        granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
        assert_eq!(
            store.release(key, held, Duration::ZERO).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    // A grant looks for the full marker, reads the clock and the group, writes the record
    // and the group's expiry; a release reads the clock and its record and deletes it.
    // Nothing else, nothing published.
    let per_cycle = counts([
        ("get", 10),
        ("time", 20),
        ("hgetall", 10),
        ("hset", 10),
        ("pexpire", 10),
        ("hmget", 10),
        ("hdel", 10),
    ]);
    assert_eq!(commands_inside_scripts(&server), per_cycle);
}

#[tokio::test]
async fn releases_and_shortening_renewals_publish_while_a_refused_candidate_may_wait() {
    let (store, server) = standalone().await;
    let key = "leader:waited-on";
    let published = || commands_inside_scripts(&server).get("publish").copied().unwrap_or(0);
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    server.cli(&["CONFIG", "RESETSTAT"]);
    // Leases of several seconds: each renewal comes well within the one before.
    assert!(matches!(
        store.renew(key, held, 8 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(published(), 0, "nobody was refused: a shorter lease wakes nobody");
    let refused = store.acquire(request(key, 1, token())).await.unwrap();
    assert!(matches!(refused, AcquireOutcome::Full { .. }), "{refused:?}");
    assert!(matches!(
        store.renew(key, held, 5 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(published(), 1, "the refused candidate waits for the old expiry: woken");
    assert!(matches!(
        store.renew(key, held, 8 * SECOND).await.unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    assert_eq!(published(), 1, "a longer lease frees nothing sooner");
    assert_eq!(store.release(key, held, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(published(), 2, "the release wakes the candidate");
    let next = token();
    granted_fence(store.acquire(request(key, 1, next)).await.unwrap());
    assert_eq!(store.release(key, next, Duration::ZERO).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(published(), 2, "the woken candidate no longer waits: the next release is silent");
}

#[tokio::test]
async fn a_grant_clears_the_mark_of_a_candidate_an_expiry_woke() {
    let (store, server) = standalone().await;
    let key = "leader:expired-under-waiter";
    let short = request_for(key, 1, token(), SECOND);
    granted_fence(store.acquire(short).await.unwrap());
    assert!(matches!(
        store.acquire(request(key, 1, token())).await.unwrap(),
        AcquireOutcome::Full { .. }
    ));
    let waiting = || server.cli(&["HEXISTS", &group_key("leader:expired-under-waiter"), "waiting"]);
    assert_eq!(waiting(), "1");
    // The refused candidate's timer ends at the expiry, which frees the slot.
    sleep(SECOND + Duration::from_millis(100)).await;
    granted_fence(store.acquire(request(key, 1, token())).await.unwrap());
    assert_eq!(waiting(), "0", "every candidate refused before was woken by the expiry");
}

#[tokio::test]
async fn a_watcher_gets_grants_and_releases_published_for_as_long_as_it_asked() {
    let (store, server) = standalone().await;
    let key = "leader:watched";
    let layout = RedisStore::group_layout(key).unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(&[&layout.grant_channel, &layout.release_channel]).await.unwrap();
    let mut messages = pubsub.into_on_message();
    use futures_util::StreamExt;

    store.announce_watcher(key, 3 * SECOND).await.unwrap();
    let ttl: i64 = server.cli(&["PTTL", &layout.group]).parse().unwrap();
    assert!(ttl > 0, "the hash the watcher made expires: {ttl}");
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    store.release(key, held, Duration::ZERO).await.unwrap();
    for channel in [&layout.grant_channel, &layout.release_channel] {
        let message = timeout(5 * SECOND, messages.next()).await.unwrap().unwrap();
        assert_eq!(message.get_channel_name(), channel.as_str());
    }
    sleep(3 * SECOND + Duration::from_millis(100)).await;
    let held = token();
    granted_fence(store.acquire(request(key, 1, held)).await.unwrap());
    store.release(key, held, Duration::ZERO).await.unwrap();
    assert!(
        timeout(Duration::from_millis(300), messages.next()).await.is_err(),
        "nothing is published once the watch ran out"
    );

    for bad in [Duration::ZERO, Duration::from_secs(86_401)] {
        let err = store.announce_watcher(key, bad).await.unwrap_err();
        assert!(err.to_string().contains("duration"), "{err}");
    }
}
