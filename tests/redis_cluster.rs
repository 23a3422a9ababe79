//! `RedisStore` on a three-primary Redis Cluster that the test creates.

use leader_testkit::conformance;
mod support;

use std::collections::HashSet;
use std::time::Duration;

use leader::{LeaderGroupElectionOptions, LeaderGroupElector, RedisStore};
use support::redis::group_key;
use support::redis_cluster::RedisCluster;
use tokio::time::{Instant, sleep};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::async_yields_async)] // the bodies hand the waiter's JoinHandle out on purpose
async fn groups_on_every_primary_follow_the_rules() {
    let cluster = RedisCluster::start();
    let config = deadpool_redis::cluster::Config::from_urls(cluster.urls());
    let store = RedisStore::cluster_builder(config).build().unwrap();
    assert_eq!(store.topology(), "cluster");

    // Groups whose names hash to slots on each of the three primaries.
    let mut names = Vec::new();
    let mut primaries = HashSet::new();
    for i in 0.. {
        let name = format!("jobs-{i}");
        let port = cluster.node_of(&group_key(&format!("leader:{name}"))).port;
        if primaries.insert(port) {
            names.push(name);
        }
        if primaries.len() == 3 {
            break;
        }
    }

    for name in &names {
        let options = LeaderGroupElectionOptions::new(2).lease_time(Duration::from_secs(30));
        let (first, second, third) = (
            LeaderGroupElector::new(store.clone(), options.clone()).unwrap(),
            LeaderGroupElector::new(store.clone(), options.clone()).unwrap(),
            LeaderGroupElector::new(
                store.clone(),
                options.clone().wait_time(Duration::from_secs(20)),
            )
            .unwrap(),
        );
        let key = group_key(&format!("leader:{name}"));
        let owner = cluster.node_of(&key);
        let result = first
            .run_if_leader(name, |_| async {
                second
                        .run_if_leader(name, |_| async {
                            // Two slot records, plus `max` and `fence`, on the owning node.
                            assert_eq!(
                                owner.cli(&["HLEN", &key]),
                                "4",
                                "{name} lives on its own node"
                            );
                            let state = first.state(name).await.unwrap();
                            assert!(state.is_full(), "{state:?}");
                            // A waiter on another node's subscription is woken by this release.
                            let waiting = tokio::spawn({
                                let (third, name) = (third.clone(), name.clone());
                                async move {
                                    third.run_if_leader(&name, |_| async { Instant::now() }).await
                                }
                            });
                            sleep(Duration::from_millis(200)).await;
                            waiting
                        })
                        .await
                        .unwrap()
                        .elected()
                        .unwrap()
            })
            .await
            .unwrap()
            .elected()
            .unwrap();
        let released_at = Instant::now();
        let elected_at = result.await.unwrap().unwrap().elected().expect("the waiter got a slot");
        assert!(
            elected_at.saturating_duration_since(released_at) < Duration::from_secs(5),
            "woken by the release, not by expiry 30 s later"
        );
    }

    // The scripts floor the server's clock to whole milliseconds.
    conformance::set_timing(Duration::from_secs(1), Duration::from_millis(1));
    conformance::run_all(&store, "cluster").await;
}
