//! `leader watch <group>`: redraw the group whenever a slot is granted, released or expires.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use futures_util::StreamExt;
use leader::{LeaseStore, RedisStore};
use tokio::time::{Instant, sleep, sleep_until};

use crate::args::{Cli, Failure};
use crate::table;

pub async fn run(cli: &Cli, group: &str, duration: Option<Duration>) -> Result<ExitCode, Failure> {
    let key = cli.key(group)?;
    let store = cli.store().await?;
    let client = redis::Client::open(cli.url.as_str())?;
    let layout = RedisStore::group_layout(&key)?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(&[layout.grant_channel, layout.release_channel]).await?;
    let mut changes = pubsub.into_on_message();
    let end = duration.map(|d| Instant::now() + d);
    let redraw_in_place = std::io::stdout().is_terminal();
    loop {
        let snapshot = store.state(&key).await?;
        let frame = table::render(group, &key, &snapshot);
        if redraw_in_place {
            print!("\x1b[2J\x1b[H{frame}");
        } else {
            println!("{frame}");
        }
        // Wake on the next grant or release, or when the earliest slot expires.
        let next_expiry = snapshot.slots.iter().map(|slot| slot.expires_in).min();
        let expiry = async {
            match next_expiry {
                Some(after) => sleep(after + Duration::from_millis(5)).await,
                None => std::future::pending().await,
            }
        };
        let ended = async {
            match end {
                Some(end) => sleep_until(end).await,
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        tokio::select! {
            message = changes.next() => {
                if message.is_none() {
                    return Err("the subscription to the group's changes was lost".into());
                }
            }
            () = expiry => {}
            () = ended => return Ok(ExitCode::SUCCESS),
        }
    }
}
