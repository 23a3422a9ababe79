//! Options loaded from a TOML file (feature `serde`), checked at load time exactly as the
//! builders check them.
//!
//! ```text
//! cargo run --example options_from_toml --features serde                       # examples/leader.toml
//! cargo run --example options_from_toml --features serde -- path/to/leader.toml
//! ```

use leader::{
    LeaderChannel, LeaderChannelOptions, LeaderGroupElectionOptions, LeaderGroupElector,
    Leadership, LeadershipOptions, MemoryStore, PartitionEvent, PartitionOptions, Partitions,
};

/// The file's layout: one table per component.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    thumbnails: LeaderGroupElectionOptions,
    scheduler: LeadershipOptions,
    outbox_channel: LeaderChannelOptions,
    consumers: PartitionOptions,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/examples/leader.toml").to_owned());
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let config: Config = toml::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    println!("loaded {path}");

    let store = MemoryStore::new();
    let thumbnails = LeaderGroupElector::new(store.clone(), config.thumbnails)?;
    println!(
        "thumbnails: {} slots, key {}",
        thumbnails.max_leaders(),
        thumbnails.key("thumbnails")?
    );
    let scheduler = Leadership::start("scheduler", store.clone(), config.scheduler).await?;
    println!("{}", scheduler.describe());
    let channel = LeaderChannel::<String>::new("outbox", &scheduler, config.outbox_channel)?;
    scheduler.wait_for_leadership().await?;
    channel.writer().send("hello".to_owned()).await;
    println!("outbox relayed {:?}", channel.reader().recv().await);
    scheduler.stop().await?;

    // A node of a set of 8 partitions: alone, it is assigned all 8.
    let mut consumers = Partitions::start("consumers", 8, store, config.consumers).await?;
    let mut assigned = 0;
    while assigned < 8 {
        if let Some(PartitionEvent::Assigned(_)) = consumers.next_event().await {
            assigned += 1;
        }
    }
    println!("consumers: {:?}", consumers.view());
    consumers.stop().await?;
    Ok(())
}
