//! `leader watch <group>`: redraw the group whenever a slot is granted, released or expires.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use std::pin::Pin;

use futures_util::StreamExt;
use leader::RedisStore;
use leader::store::GroupWatch;
use leader::store::SharedStore;
use tokio::time::{Instant, sleep, sleep_until};

use crate::args::{Cli, Failure};
use crate::table;

pub async fn run(cli: &Cli, group: &str, duration: Option<Duration>) -> Result<ExitCode, Failure> {
    let key = cli.key(group)?;
    let store = cli.store().await?;
    let mut changes = Changes::subscribe(cli, &store, &key).await?;
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
        // Wake on the next change, or when the earliest slot expires.
        let next_expiry = snapshot.leaders.iter().map(|slot| slot.expires_in).min();
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
            changed = changes.next() => changed?,
            () = expiry => {}
            () = ended => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// How long one announcement keeps the group's changes published, and how often it is
/// renewed: a watcher that dies stops costing the server within `WATCH_FOR`.
const WATCH_FOR: Duration = Duration::from_secs(30);
const ANNOUNCE_EVERY: Duration = Duration::from_secs(10);

/// What wakes a redraw: on Redis, the group's grant and release channels, which the store
/// publishes on while this watcher announces itself; on other stores (PostgreSQL), the
/// store's release notifications, and a look every second for grants (which send none).
enum Changes {
    Redis {
        messages: Pin<Box<dyn futures_util::Stream<Item = redis::Msg> + Send>>,
        store: RedisStore,
        key: String,
        announced_at: Instant,
    },
    Releases(GroupWatch),
}

impl Changes {
    async fn subscribe(cli: &Cli, store: &SharedStore, key: &str) -> Result<Self, Failure> {
        Ok(if cli.is_standalone_redis() {
            let store =
                RedisStore::builder(&cli.url).command_timeout(cli.command_timeout).build()?;
            let client = redis::Client::open(cli.url.as_str())?;
            let layout = RedisStore::group_layout(key)?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&[layout.grant_channel, layout.release_channel]).await?;
            store.announce_watcher(key, WATCH_FOR).await?;
            Changes::Redis {
                messages: Box::pin(pubsub.into_on_message()),
                store,
                key: key.to_owned(),
                announced_at: Instant::now(),
            }
        } else {
            Changes::Releases(store.watch_releases(key).await?)
        })
    }

    async fn next(&mut self) -> Result<(), Failure> {
        match self {
            Changes::Redis { messages, store, key, announced_at } => {
                tokio::select! {
                    message = messages.next() => match message {
                        Some(_) => Ok(()),
                        None => Err("the subscription to the group's changes was lost".into()),
                    },
                    () = sleep_until(*announced_at + ANNOUNCE_EVERY) => {
                        store.announce_watcher(key, WATCH_FOR).await?;
                        *announced_at = Instant::now();
                        Ok(())
                    }
                }
            }
            Changes::Releases(releases) => {
                tokio::select! {
                    () = releases.woken() => {}
                    () = sleep(Duration::from_secs(1)) => {}
                }
                Ok(())
            }
        }
    }
}
