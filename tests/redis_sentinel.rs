//! `RedisStore` through Sentinel, failing over while a leader holds a slot.

mod support;

use std::time::Duration;

use leader::{LeaderElectionOptions, LeaderElector, RedisStore};
use support::redis_sentinel::{MASTER_NAME, RedisSentinel};

/// Slot records of the group `failover` on `server` (its hash less the bookkeeping fields).
fn live_slots(server: &support::redis_server::RedisServer) -> usize {
    let fields = server.cli(&["HKEYS", "{leader:failover}:group"]);
    let bookkeeping = ["", "max", "fence", "waiting", "watched"];
    fields.lines().filter(|f| !bookkeeping.contains(f)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_while_a_leader_holds_its_slot() {
    let set_up = std::sync::Arc::new(RedisSentinel::start());
    let config = deadpool_redis::sentinel::Config::from_urls(
        vec![set_up.sentinel_url()],
        MASTER_NAME.to_owned(),
        deadpool_redis::sentinel::SentinelServerType::Master,
    );
    let store = RedisStore::sentinel_builder(config).build().unwrap();
    assert_eq!(store.topology(), "sentinel");
    let options = LeaderElectionOptions::new()
        .lease_time(Duration::from_secs(30))
        .auto_extend(true)
        .renew_interval(Duration::from_secs(1));
    let holder = LeaderElector::new(store.clone(), options.clone()).unwrap();
    let rival = LeaderElector::new(store.clone(), options).unwrap();

    let (set_up, rival) = (&set_up, &rival);
    let during = holder
        .run_if_leader("failover", |lease| async move {
            // Fail over under the holder. Renewals that reach the old primary before it is
            // demoted are lost with it; a lease longer than the failover outlives that.
            let failing_over = set_up.clone();
            tokio::task::spawn_blocking(move || failing_over.fail_over()).await.unwrap();
            let promoted_expiry = set_up.replica.cli(&["HGETALL", "{leader:failover}:group"]);
            // Renewals now reach the new primary: its copy of the slot moves forward.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let renewed_expiry = set_up.replica.cli(&["HGETALL", "{leader:failover}:group"]);
            assert_ne!(promoted_expiry, renewed_expiry, "renewals did not reach the new primary");
            let rival_result = rival.run_if_leader("failover", |_| async {}).await.unwrap();
            let held = live_slots(&set_up.replica);
            (lease.loss_reason(), rival_result.is_skipped(), held)
        })
        .await
        .unwrap();
    assert_eq!(
        during.elected(),
        Some((None, true, 1)),
        "the lease survived on the new primary and still excludes rivals"
    );
    assert_eq!(live_slots(&set_up.replica), 0, "released on the new primary");
    let after =
        holder.run_if_leader("failover", |lease| async move { lease.fence() }).await.unwrap();
    assert!(after.is_elected());
}
