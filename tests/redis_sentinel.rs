//! `RedisStore` through Sentinel, failing over while a leader holds a slot.

mod support;

use std::time::Duration;

use leader::{LeaderElectionOptions, LeaderElector, RedisStore};
use support::redis::{group_key, slot_records};
use support::redis_sentinel::{MASTER_NAME, RedisSentinel};

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
            // The grant on the replica first: replication is asynchronous and this test asks
            // for no acknowledgement, so a failover right after the grant may promote a
            // replica that never had it (seen once in CI, on a loaded machine). The holder
            // then has nothing to renew there, which is what `replica_ack` is for, and not
            // what this test is about.
            let replicated = async {
                while set_up.replica.cli(&["HGETALL", &group_key("leader:failover")]).is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(10), replicated)
                .await
                .expect("the grant reached the replica");
            // Fail over under the holder. Renewals that reach the old primary before it is
            // demoted are lost with it; a lease longer than the failover outlives that.
            let failing_over = set_up.clone();
            tokio::task::spawn_blocking(move || failing_over.fail_over()).await.unwrap();
            let promoted_expiry = set_up.replica.cli(&["HGETALL", &group_key("leader:failover")]);
            // Renewals now reach the new primary: its copy of the slot moves forward.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let renewed_expiry = set_up.replica.cli(&["HGETALL", &group_key("leader:failover")]);
            assert_ne!(promoted_expiry, renewed_expiry, "renewals did not reach the new primary");
            let rival_result = rival.run_if_leader("failover", |_| async {}).await.unwrap();
            let held = slot_records(&set_up.replica, "leader:failover");
            (lease.loss_reason(), rival_result.is_skipped(), held)
        })
        .await
        .unwrap();
    assert_eq!(
        during.elected(),
        Some((None, true, 1)),
        "the lease survived on the new primary and still excludes rivals"
    );
    assert_eq!(slot_records(&set_up.replica, "leader:failover"), 0, "released on the new primary");
    let after =
        holder.run_if_leader("failover", |lease| async move { lease.fence() }).await.unwrap();
    assert!(after.is_elected());
}
