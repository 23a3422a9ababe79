//! [`Notifications`]: one etcd watch per group that someone in this process waits for or
//! observes, shared by all of them, and what its events wake.
//!
//! | event on the group's range | wakes |
//! |---|---|
//! | a slot deleted (released, expired, revoked) | waiters and observers |
//! | a slot written again (a renewal under another TTL, a release kept for the minimum lease) | waiters and observers |
//! | a slot created (a grant, or a pending one in its lock-delay) | observers |
//! | the group's claim deleted (lapsed), unless by a grant of the same revision | waiters and observers |
//!
//! The watch starts on the preferred member and asks for a leader (etcd cancels a watch on
//! a member that lost its leader). When it fails, ends, or is cancelled (a compacted
//! revision included), the one subscription driver (`resubscribe::keep`) makes it again on
//! the next member, with its backoff; observers are woken at the failure and after each
//! failed attempt (they read the state, so they report the failure), and everyone is woken
//! once it is back, since events may have been missed.
//!
//! Not the other stores' `Listener` (one notification connection per store): a watch of the
//! store's whole prefix would deliver every write under it (with no prefix, every write of
//! the cluster, a Kubernetes etcd's included) to every store with a waiter. A watch per
//! group delivers only the groups someone here waits for; it is made again by the same
//! driver as the listener's connection.

use std::sync::{Arc, Weak};

use etcd_client::{EventType, WatchOptions};
use tokio::sync::watch;

use super::hints::Hints;
use super::layout::{GroupKeys, Part};
use super::members::Members;
use crate::error::Error;
use crate::share::{Share, Shares};
use crate::store::bound::Bound;
use crate::store::resubscribe::{Subscription, keep};
use crate::store::watch::Interest;
use crate::store::{GroupSignal, GroupWatch};

/// The store's notifications (the role `Notifications` plays in every store): here, the
/// groups watched by this store, one etcd watch each.
#[derive(Default)]
pub(crate) struct Notifications {
    by_key: Shares<String, Feed>,
}

/// One group's watch, and the signals it wakes; the watch ends with the last
/// [`GroupWatch`] that holds it.
struct Feed {
    signals: Arc<FeedSignals>,
    /// Whether etcd has confirmed the watch (at first; later gaps wake everyone instead).
    ready: watch::Receiver<Start>,
    task: tokio::task::AbortHandle,
}

/// What a feed's events wake: waiters (releases) and observers (changes).
#[derive(Default)]
struct FeedSignals {
    releases: GroupSignal,
    changes: GroupSignal,
}

/// How the first watch of a feed went.
#[derive(Clone, Debug)]
enum Start {
    Pending,
    Confirmed,
    Failed(Arc<Error>),
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Notifications {
    /// A watch of group `keys`, woken as the table above says for `interest`. It returns once
    /// etcd has confirmed the group's watch, so no event after the return is missed.
    pub(crate) async fn watch(
        &self,
        members: &Arc<Members>,
        hints: &Arc<Hints>,
        keys: GroupKeys,
        bound: Bound,
        interest: Interest,
    ) -> Result<GroupWatch, Error> {
        let feed = self.feed(members, hints, keys);
        let mut ready = feed.ready.clone();
        let start = bound.run(ready.wait_for(|start| !matches!(start, Start::Pending))).await?;
        if let Ok(start) = start
            && let Start::Failed(error) = &*start
        {
            return Err(Error::duplicate(error));
        }
        let watch = match interest {
            Interest::Releases => feed.signals.releases.watch(),
            Interest::Changes => feed.signals.changes.watch(),
        };
        Ok(watch.holding(feed))
    }

    /// The group's live feed (unless its first watch failed), or a new one.
    fn feed(
        &self,
        members: &Arc<Members>,
        hints: &Arc<Hints>,
        keys: GroupKeys,
    ) -> Share<String, Feed> {
        let reuse = |feed: &Feed| !matches!(&*feed.ready.borrow(), Start::Failed(_));
        self.by_key.get_or_start(&keys.range.clone(), reuse, || {
            let signals = Arc::new(FeedSignals::default());
            let (started, ready) = watch::channel(Start::Pending);
            let task = tokio::spawn(follow(
                Arc::downgrade(members),
                hints.clone(),
                keys,
                signals.clone(),
                started,
            ));
            Feed { signals, ready, task: task.abort_handle() }
        })
    }
}

/// Keeps the group's watch until the feed is dropped (which aborts this task): the first
/// here, reporting how it went, then through the one subscription driver.
async fn follow(
    members: Weak<Members>,
    hints: Arc<Hints>,
    keys: GroupKeys,
    signals: Arc<FeedSignals>,
    started: watch::Sender<Start>,
) {
    let watched = Watched { members, hints, keys, signals };
    match watched.open(0).await {
        Ok(stream) => {
            started.send_replace(Start::Confirmed);
            keep(&watched, stream).await;
        }
        Err(error) => {
            started.send_replace(Start::Failed(Arc::new(error)));
        }
    }
}

/// One group's watch, as the subscription driver follows it.
struct Watched {
    members: Weak<Members>,
    hints: Arc<Hints>,
    keys: GroupKeys,
    signals: Arc<FeedSignals>,
}

impl Subscription for Watched {
    type Live = etcd_client::WatchStream;
    type Error = Error;

    fn name(&self) -> String {
        format!("etcd watch of {}", self.keys.range.trim_end())
    }

    async fn open(&self, _: usize) -> Result<etcd_client::WatchStream, Error> {
        let Some(members) = self.members.upgrade() else {
            return Err(Error::Unsupported { store: "etcd", operation: "watch a dropped store" });
        };
        open(&members, &self.keys).await
    }

    async fn until_lost(&self, stream: &mut etcd_client::WatchStream) -> String {
        deliver(stream, &self.keys, &self.signals, &self.hints).await
    }

    fn lost(&self) {
        self.signals.changes.wake();
    }

    fn failed(&self) {
        self.signals.changes.wake();
    }

    fn restored(&self) {
        self.signals.releases.wake();
        self.signals.changes.wake();
    }
}

/// A confirmed watch of the group's range on the preferred member (the next one after a
/// failure).
async fn open(members: &Members, keys: &GroupKeys) -> Result<etcd_client::WatchStream, Error> {
    let bound = members.bound("watch");
    let open = members.call(&bound, |client| {
        let range = keys.range.clone();
        async move {
            let options = WatchOptions::new().with_prefix();
            let mut stream = client.watch_client().watch(range, Some(options)).await?;
            match stream.message().await? {
                Some(reply) if reply.created() && !reply.canceled() => Ok(stream),
                Some(reply) => Err(etcd_client::Error::WatchError(format!(
                    "watch not created: {}",
                    reply.cancel_reason()
                ))),
                None => Err(etcd_client::Error::WatchError("watch stream ended".into())),
            }
        }
    });
    open.await
}

/// Wakes the group's signals for every event, until the watch ends; returns why it ended.
async fn deliver(
    stream: &mut etcd_client::WatchStream,
    keys: &GroupKeys,
    signals: &FeedSignals,
    hints: &Hints,
) -> String {
    loop {
        let reply = match stream.message().await {
            Ok(Some(reply)) => reply,
            Ok(None) => return "the stream ended".to_owned(),
            Err(error) => return error.to_string(),
        };
        if reply.canceled() {
            return format!(
                "cancelled by the member: {} (compacted at {})",
                reply.cancel_reason(),
                reply.compact_revision()
            );
        }
        let seen = reply.events().iter().filter_map(|event| {
            let kv = event.kv()?;
            Some(Seen {
                part: keys.part_of(kv.key())?,
                deleted: event.event_type() == EventType::Delete,
                version: kv.version(),
                revision: kv.mod_revision(),
            })
        });
        let Wakes { released, granted, freed } = wakes(seen);
        for (index, revision) in freed {
            hints.freed(&keys.range, index, revision);
        }
        if released {
            signals.releases.wake();
        }
        if released || granted {
            signals.changes.wake();
        }
    }
}

/// One event on a group's key, as far as what it wakes goes.
#[derive(Debug, Clone, Copy)]
struct Seen {
    part: Part,
    deleted: bool,
    /// The key's version (1: just created).
    version: i64,
    /// The revision of the event.
    revision: i64,
}

/// What one watch reply's events wake, and the slots they freed (index, revision).
#[derive(Debug, Default, PartialEq, Eq)]
struct Wakes {
    released: bool,
    granted: bool,
    freed: Vec<(u32, i64)>,
}

/// What `events` (one watch reply's, which may carry several revisions) wake: a slot
/// deleted or written again releases, one created is granted; a claim that ended releases
/// (it frees the slot it held back) unless a grant of the same revision ended it (its
/// holder's transaction: nothing freed).
fn wakes(events: impl IntoIterator<Item = Seen>) -> Wakes {
    let mut wakes = Wakes::default();
    let (mut grants, mut claims_ended) = (Vec::new(), Vec::new());
    for seen in events {
        match seen.part {
            Part::Slot(index) if seen.deleted => {
                wakes.released = true;
                wakes.freed.push((index, seen.revision));
            }
            Part::Slot(_) if seen.version > 1 => wakes.released = true,
            Part::Slot(_) => {
                wakes.granted = true;
                grants.push(seen.revision);
            }
            Part::Claim if seen.deleted => claims_ended.push(seen.revision),
            _ => {}
        }
    }
    wakes.released |= claims_ended.iter().any(|ended| !grants.contains(ended));
    wakes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(part: Part, deleted: bool, version: i64, revision: i64) -> Seen {
        Seen { part, deleted, version, revision }
    }

    /// A claim ended by its holder's grant (one revision) frees nothing; one that lapsed
    /// frees the slot it held back, even beside a grant of another revision in one reply.
    #[test]
    fn a_claims_end_releases_unless_a_grant_of_its_revision_ended_it() {
        let granted_and_ended = [seen(Part::Slot(0), false, 1, 5), seen(Part::Claim, true, 0, 5)];
        let wakes_of = wakes(granted_and_ended);
        assert!(!wakes_of.released && wakes_of.granted, "{wakes_of:?}");
        let then_lapsed = [seen(Part::Slot(1), false, 1, 5), seen(Part::Claim, true, 0, 6)];
        assert!(wakes(then_lapsed).released);
        let freed = wakes([seen(Part::Slot(2), true, 0, 7), seen(Part::Last(2), true, 0, 7)]);
        assert_eq!(freed, Wakes { released: true, granted: false, freed: vec![(2, 7)] });
    }
}
