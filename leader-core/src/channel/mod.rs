//! [`LeaderChannel`]: a bounded channel gated on a [`Leadership`]: every instance writes,
//! only the leader's items reach the reader.

mod drops;
mod queue;

use std::sync::{Arc, Weak};
use std::time::Duration;

pub use drops::{DropCounts, DropReason};

use self::drops::Drops;
use self::queue::{Push, Queue};
use crate::duration::positive;
use crate::error::Error;
use crate::leadership::Leadership;

/// What a writer does when the buffer is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "snake_case")
)]
pub enum FullMode {
    /// Wait for space (woken if leadership ends meanwhile, and the item then dropped as a
    /// follower's).
    #[default]
    Wait,
    /// Drop the new item, counted as [`DropReason::Full`].
    DropNewest,
}

/// Options of a [`LeaderChannel`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(remote = "Self", default, deny_unknown_fields)
)]
pub struct LeaderChannelOptions {
    capacity: usize,
    full_mode: FullMode,
    drain_on_loss: bool,
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::drop_report_interval"
        )
    )]
    drop_report_interval: Duration,
}

crate::serde_support::validated_serde!(LeaderChannelOptions, LeaderChannelOptions::validate);

impl Default for LeaderChannelOptions {
    fn default() -> Self {
        LeaderChannelOptions {
            capacity: 1024,
            full_mode: FullMode::Wait,
            drain_on_loss: false,
            drop_report_interval: Duration::from_secs(30),
        }
    }
}

impl LeaderChannelOptions {
    /// The defaults: 1,024 items, writers wait when full, no draining, a drop summary at most
    /// every 30 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many items the buffer holds. Default: 1,024. At least 1.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// What writers do when the buffer is full. Default: [`FullMode::Wait`].
    pub fn full_mode(mut self, full_mode: FullMode) -> Self {
        self.full_mode = full_mode;
        self
    }

    /// Discard the buffered items when leadership ends (counted as [`DropReason::Loss`]),
    /// instead of leaving them for the reader. Default: false. Either way, guard leader-only
    /// side effects with the leadership token: admission to the channel is not fencing.
    pub fn drain_on_loss(mut self, drain: bool) -> Self {
        self.drain_on_loss = drain;
        self
    }

    /// Checks every option as [`LeaderChannel::new`] does; the error names the first value
    /// out of range.
    pub fn validate(&self) -> Result<(), Error> {
        if self.capacity == 0 {
            return Err(Error::invalid_option("capacity", 0, "must be at least 1"));
        }
        positive("drop_report_interval", self.drop_report_interval).map(drop)
    }

    /// The least time between two drop summaries in the log. Default: 30 s. At least 1 ms.
    pub fn drop_report_interval(mut self, every: Duration) -> Self {
        self.drop_report_interval = every;
        self
    }
}

/// A bounded channel gated on a [`Leadership`]: producers on every instance write to it;
/// a leader's items reach the reader, a follower's are accepted and dropped. That keeps a
/// standby's producers running without letting the standby act.
///
/// ```
/// use leader_core::{Delivery, Leadership, LeadershipOptions, LeaderChannel, LeaderChannelOptions, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let leadership = Leadership::start("inventory", MemoryStore::new(), LeadershipOptions::new()).await?;
/// let changes = LeaderChannel::new("inventory-changes", &leadership, LeaderChannelOptions::new())?;
/// leadership.wait_for_leadership().await?;
/// assert_eq!(changes.writer().send("sku-1 -1").await, Delivery::Queued);
/// assert_eq!(changes.reader().recv().await, Some("sku-1 -1"));
/// # Ok(()) }
/// ```
pub struct LeaderChannel<T> {
    shared: Arc<Shared<T>>,
    writer: LeaderChannelWriter<T>,
}

struct Shared<T> {
    name: String,
    leadership: Leadership,
    queue: Queue<T>,
    drops: Drops,
    full_mode: FullMode,
}

/// What became of a written item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Buffered for the reader.
    Queued,
    /// Accepted and discarded, for this reason.
    Dropped(DropReason),
}

impl<T: Send + 'static> LeaderChannel<T> {
    /// A channel named `name` (for logs) gated on `leadership`.
    pub fn new(
        name: &str,
        leadership: &Leadership,
        options: LeaderChannelOptions,
    ) -> Result<Self, Error> {
        options.validate()?;
        let report_every = options.drop_report_interval;
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            leadership: leadership.clone(),
            queue: Queue::new(options.capacity),
            drops: Drops::new(report_every),
            full_mode: options.full_mode,
        });
        tokio::spawn(follow_leadership(
            Arc::downgrade(&shared),
            leadership.subscribe(),
            options.drain_on_loss,
        ));
        let writer = LeaderChannelWriter { shared: shared.clone() };
        Ok(LeaderChannel { shared, writer })
    }

    /// A writer; clone it for every producer. The reader sees the end of the channel once
    /// the channel and every writer are dropped.
    pub fn writer(&self) -> LeaderChannelWriter<T> {
        self.writer.clone()
    }

    /// A reader. Several readers share the items, each item reaching one of them.
    pub fn reader(&self) -> LeaderChannelReader<T> {
        LeaderChannelReader { shared: self.shared.clone() }
    }

    /// Items dropped so far, by reason.
    pub fn drops(&self) -> DropCounts {
        self.shared.drops.totals()
    }

    /// Items buffered now.
    pub fn len(&self) -> usize {
        self.shared.queue.len()
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Writes to a [`LeaderChannel`].
pub struct LeaderChannelWriter<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for LeaderChannelWriter<T> {
    fn clone(&self) -> Self {
        self.shared.queue.add_writer();
        LeaderChannelWriter { shared: self.shared.clone() }
    }
}

impl<T> Drop for LeaderChannelWriter<T> {
    fn drop(&mut self) {
        self.shared.queue.remove_writer();
    }
}

impl<T> LeaderChannelWriter<T> {
    /// Writes `item`: buffered while this instance leads, dropped (and counted) while it
    /// follows. With [`FullMode::Wait`] a full buffer makes it wait for space, or for the end
    /// of the term, after which the item is dropped as a follower's.
    pub async fn send(&self, mut item: T) -> Delivery {
        let shared = &*self.shared;
        loop {
            let term = shared.leadership.leadership_token();
            if term.is_cancelled() {
                return self.dropped(DropReason::Follower);
            }
            let space_freed = shared.queue.space_freed();
            tokio::pin!(space_freed);
            space_freed.as_mut().enable();
            match shared.queue.try_push(item) {
                Push::Pushed => return Delivery::Queued,
                Push::Full(_) if shared.full_mode == FullMode::DropNewest => {
                    return self.dropped(DropReason::Full);
                }
                Push::Full(returned) => item = returned,
            }
            tokio::select! {
                biased;
                () = space_freed => {}
                () = term.cancelled() => {}
            }
        }
    }

    /// Writes `item` without waiting: a full buffer drops it as [`DropReason::Full`].
    pub fn try_send(&self, item: T) -> Delivery {
        let shared = &*self.shared;
        if !shared.leadership.is_leader() {
            return self.dropped(DropReason::Follower);
        }
        match shared.queue.try_push(item) {
            Push::Pushed => Delivery::Queued,
            Push::Full(_) => self.dropped(DropReason::Full),
        }
    }

    fn dropped(&self, reason: DropReason) -> Delivery {
        self.shared.drops.record(&self.shared.name, reason, 1);
        Delivery::Dropped(reason)
    }
}

/// Reads from a [`LeaderChannel`].
pub struct LeaderChannelReader<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for LeaderChannelReader<T> {
    fn clone(&self) -> Self {
        LeaderChannelReader { shared: self.shared.clone() }
    }
}

impl<T> LeaderChannelReader<T> {
    /// The next item, waiting for one; `None` once the channel and every writer are gone
    /// and the buffer is empty.
    pub async fn recv(&self) -> Option<T> {
        self.shared.queue.pop().await
    }

    /// The next item if one is buffered.
    pub fn try_recv(&self) -> Option<T> {
        self.shared.queue.try_pop()
    }
}

/// On every change of leadership: log the drop summary's tail on election, and drain the
/// buffer on loss if asked. Ends with the channel or the leadership.
async fn follow_leadership<T>(
    channel: Weak<Shared<T>>,
    mut changes: tokio::sync::watch::Receiver<crate::LeadershipStatus>,
    drain_on_loss: bool,
) {
    let mut leading = changes.borrow_and_update().is_leader;
    while changes.changed().await.is_ok() {
        let Some(channel) = channel.upgrade() else { return };
        let now_leading = changes.borrow_and_update().is_leader;
        if now_leading && !leading {
            channel.drops.flush(&channel.name);
        }
        if leading && !now_leading && drain_on_loss {
            let drained = channel.queue.drain() as u64;
            channel.drops.record(&channel.name, DropReason::Loss, drained);
        }
        leading = now_leading;
    }
}
