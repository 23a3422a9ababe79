//! A Redis Cluster of three primaries, made by the test with `redis-cli --cluster create`.

use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, cli};

/// Three primaries sharing the 16,384 slots, no replicas; stopped on drop.
pub struct RedisCluster {
    /// The primaries, in the order they were started.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes, joins them with `redis-cli --cluster create` and waits until
    /// the cluster is ok.
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let addresses: Vec<String> =
            nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        let created = cli(nodes[0].port, &args);
        assert!(created.contains("All 16384 slots covered"), "cluster create said:\n{created}");
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok();
        cluster
    }

    /// Waits until every node reports `cluster_state:ok` (a restarted primary takes about
    /// two seconds before it accepts writes again).
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &self.nodes {
            while !node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                assert!(Instant::now() < deadline, "the cluster did not become ok");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// The nodes' URLs, as seeds for a Cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The node that serves `key`.
    pub fn node_of(&self, key: &str) -> &RedisServer {
        &self.nodes[self.index_of(key)]
    }

    /// The index in [`nodes`](Self::nodes) of the node that serves `key`.
    pub fn index_of(&self, key: &str) -> usize {
        let slot: u16 = self.nodes[0].cli(&["CLUSTER", "KEYSLOT", key]).parse().unwrap();
        self.nodes
            .iter()
            .position(|node| {
                let nodes = node.cli(&["CLUSTER", "NODES"]);
                nodes.lines().any(|line| line.contains("myself") && serves(line, slot))
            })
            .expect("a node serves every slot")
    }
}

/// Whether a `CLUSTER NODES` line lists `slot` among its ranges.
fn serves(line: &str, slot: u16) -> bool {
    line.split_whitespace().skip(8).any(|range| match range.split_once('-') {
        Some((from, to)) => {
            (from.parse().unwrap_or(u16::MAX)..=to.parse().unwrap_or(0)).contains(&slot)
        }
        None => range.parse() == Ok(slot),
    })
}
