//! Counting what a [`LeaderChannel`](super::LeaderChannel) drops, and summarising it in the
//! log at most once per interval.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Why an item was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// Written while this instance did not lead: accepted and discarded.
    Follower,
    /// The buffer was full (with [`FullMode::DropNewest`](super::FullMode::DropNewest)).
    Full,
    /// Still buffered when leadership ended, with `drain_on_loss`.
    Loss,
}

/// How many items were dropped, by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DropCounts {
    /// Written while following.
    pub follower: u64,
    /// Refused by a full buffer.
    pub full: u64,
    /// Drained when leadership ended.
    pub loss: u64,
}

impl DropCounts {
    fn add(&mut self, reason: DropReason, n: u64) {
        match reason {
            DropReason::Follower => self.follower += n,
            DropReason::Full => self.full += n,
            DropReason::Loss => self.loss += n,
        }
    }

    fn is_zero(&self) -> bool {
        *self == DropCounts::default()
    }
}

/// Totals since the channel opened, and what has not been logged yet.
pub(crate) struct Drops {
    follower: AtomicU64,
    full: AtomicU64,
    loss: AtomicU64,
    unreported: Mutex<(DropCounts, Option<Instant>)>,
    report_every: Duration,
}

impl Drops {
    pub(crate) fn new(report_every: Duration) -> Self {
        Drops {
            follower: AtomicU64::new(0),
            full: AtomicU64::new(0),
            loss: AtomicU64::new(0),
            unreported: Mutex::new((DropCounts::default(), None)),
            report_every,
        }
    }

    /// Counts `n` items dropped for `reason`; logs a summary if the last was long enough ago.
    pub(crate) fn record(&self, channel: &str, reason: DropReason, n: u64) {
        if n == 0 {
            return;
        }
        let total = match reason {
            DropReason::Follower => &self.follower,
            DropReason::Full => &self.full,
            DropReason::Loss => &self.loss,
        };
        total.fetch_add(n, Ordering::Relaxed);
        let label = match reason {
            DropReason::Follower => "follower",
            DropReason::Full => "full",
            DropReason::Loss => "loss",
        };
        crate::telemetry::metric::channel_dropped(channel, label, n);
        let mut unreported = self.unreported.lock().unwrap_or_else(|p| p.into_inner());
        unreported.0.add(reason, n);
        let now = Instant::now();
        if unreported.1.is_none_or(|last| now.duration_since(last) >= self.report_every) {
            report(channel, &mut unreported.0);
            unreported.1 = Some(now);
        }
    }

    /// Logs whatever has not been logged yet (the tail), for example on becoming leader.
    pub(crate) fn flush(&self, channel: &str) {
        let mut unreported = self.unreported.lock().unwrap_or_else(|p| p.into_inner());
        if !unreported.0.is_zero() {
            report(channel, &mut unreported.0);
            unreported.1 = Some(Instant::now());
        }
    }

    pub(crate) fn totals(&self) -> DropCounts {
        DropCounts {
            follower: self.follower.load(Ordering::Relaxed),
            full: self.full.load(Ordering::Relaxed),
            loss: self.loss.load(Ordering::Relaxed),
        }
    }
}

fn report(channel: &str, counts: &mut DropCounts) {
    tracing::info!(
        channel,
        follower = counts.follower,
        full = counts.full,
        loss = counts.loss,
        "leader channel dropped items"
    );
    *counts = DropCounts::default();
}
