//! [`KeepAlives`]: one keep-alive stream per lease. etcd-client opens a bidirectional gRPC
//! stream with every `keep_alive()` call; the store keeps the stream it opened for a lease
//! and sends each renewal on it, opening another (on the next member, after a failure) only
//! when it broke.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::Instant;

use super::EtcdStore;
use super::bounded::{Bounded, MOST};
use super::failures::lease_not_found;
use super::leases::secs;
use crate::error::Error;
use crate::store::bound::Bound;

/// How long past its lease's end a stream no renewal used is kept: the lease is gone by
/// then unless kept alive, and keeping it alive uses the stream.
const GRACE: Duration = Duration::from_secs(1);

/// An open keep-alive stream: what sends, what answers, and the member it is open on.
struct Stream {
    keeper: LeaseKeeper,
    replies: LeaseKeepAliveStream,
    member: usize,
}

/// A lease's stream, used by one renewal at a time (its lock), so every reply answers the
/// request sent just before it; and when it may be closed if no renewal uses it again.
struct Entry {
    stream: Arc<tokio::sync::Mutex<Option<Stream>>>,
    idle_until: Instant,
}

/// The open streams of one store, by lease. A stream is closed when its lease is revoked,
/// expired or let go ([`forget`](Self::forget)), and otherwise when its lease has run out
/// with no renewal since: a sweep in the background, while streams are open, closes those
/// (a lease kept alive through a lock-delay after its session ended, say), so the streams
/// kept are those of live leases, however many leases come and go ([`MOST`] at most: past
/// that the stream used least recently is closed, and opened again by its next renewal).
#[derive(Default)]
pub(crate) struct KeepAlives {
    streams: Arc<Streams>,
}

struct Streams {
    by_lease: Bounded<i64, Entry>,
    /// Whether a sweep runs; changed only under `by_lease`'s lock, so a stream opened as a
    /// sweep ends starts another.
    sweeping: AtomicBool,
}

impl Default for Streams {
    fn default() -> Self {
        Streams { by_lease: Bounded::new(MOST), sweeping: AtomicBool::new(false) }
    }
}

impl KeepAlives {
    /// `lease`'s stream, kept until `ttl` seconds (and the grace) after this use.
    fn stream_of(&self, lease: i64, ttl: i64) -> Arc<tokio::sync::Mutex<Option<Stream>>> {
        let idle_until = Instant::now() + secs(ttl) + GRACE;
        let mut by_lease = self.streams.by_lease.lock();
        let entry =
            by_lease.get_or_insert_mut(lease, || Entry { stream: Arc::default(), idle_until });
        entry.idle_until = entry.idle_until.max(idle_until);
        let stream = entry.stream.clone();
        if !self.streams.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(sweep(Arc::downgrade(&self.streams)));
        }
        drop(by_lease);
        stream
    }

    /// Closes `lease`'s stream, if one is open (the lease is revoked, expired or let go).
    pub(crate) fn forget(&self, lease: i64) {
        self.streams.by_lease.lock().pop(&lease);
    }

    /// How many streams are kept open (shown by the store's `Debug`).
    pub(crate) fn open(&self) -> usize {
        self.streams.by_lease.lock().len()
    }
}

/// Closes the streams of leases that ran out unrenewed, at each one's end, until none is
/// left (the next stream opened starts another sweep) or the store is dropped. A sweep that
/// ends otherwise (its runtime shut down) lets the next stream opened start another.
async fn sweep(streams: Weak<Streams>) {
    /// Marks the sweep as ended if it is dropped before it ends by itself.
    struct Ended(Option<Weak<Streams>>);
    impl Drop for Ended {
        fn drop(&mut self) {
            if let Some(streams) = self.0.take().and_then(|streams| streams.upgrade()) {
                let _by_lease = streams.by_lease.lock();
                streams.sweeping.store(false, Ordering::Relaxed);
            }
        }
    }
    let mut ended = Ended(Some(streams.clone()));
    loop {
        let next = {
            let Some(streams) = streams.upgrade() else { return };
            let mut by_lease = streams.by_lease.lock();
            let now = Instant::now();
            // A stream in use is a renewal in flight: it moves its entry's end on.
            Bounded::retain(&mut by_lease, |_, entry| {
                entry.idle_until > now || entry.stream.try_lock().is_err()
            });
            match by_lease.iter().map(|(_, entry)| entry.idle_until).min() {
                Some(next) => next.max(now + GRACE),
                None => {
                    // Under the lock: a stream opened from now on starts another sweep.
                    streams.sweeping.store(false, Ordering::Relaxed);
                    ended.0 = None;
                    return;
                }
            }
        };
        tokio::time::sleep_until(next).await;
    }
}

impl EtcdStore {
    /// Keeps `lease` (of `ttl` seconds) alive: `Ok(true)` when it was, `Ok(false)` when it
    /// is gone. Sent on the
    /// lease's open stream, which has its share of the time left (as a call to one member
    /// has); a stream that fails or does not answer in it is closed, its member left for
    /// the next, and a new stream opened there (its opening is the renewal).
    pub(crate) async fn keep_alive(
        &self,
        bound: &Bound,
        lease: i64,
        ttl: i64,
    ) -> Result<bool, Error> {
        let keep_alives = &self.inner.keep_alives;
        let members = &self.inner.members;
        let stream = keep_alives.stream_of(lease, ttl);
        let mut open = bound.run(stream.lock()).await?;
        // Taken out while in use: a renewal dropped between its request and the reply leaves
        // no stream behind whose next reply would answer the request before (a new one is
        // opened at the next renewal).
        if let Some(mut stream) = open.take() {
            let share = bound.left() / u32::try_from(members.count()).unwrap_or(1);
            let renewed = tokio::time::timeout(share, async {
                stream.keeper.keep_alive().await?;
                stream.replies.message().await
            })
            .await;
            match renewed {
                Ok(Ok(Some(reply))) if reply.ttl() > 0 => {
                    *open = Some(stream);
                    return Ok(true);
                }
                Ok(Ok(Some(_))) => {
                    keep_alives.forget(lease);
                    return Ok(false);
                }
                // Broken, ended or silent: its member is left, and a stream opened below.
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => members.leave(stream.member),
            }
        }
        let opened = members
            .call(bound, |client| async move {
                match client.lease_client().keep_alive(lease).await {
                    Ok(stream) => Ok(Some(stream)),
                    Err(error) if lease_not_found(&error) => Ok(None),
                    Err(error) => Err(error),
                }
            })
            .await?;
        match opened {
            Some((keeper, replies)) => {
                *open = Some(Stream { keeper, replies, member: members.preferred() });
                Ok(true)
            }
            None => {
                drop(open);
                keep_alives.forget(lease);
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn streams_are_kept_by_lease_and_forgotten() {
        let keep_alives = KeepAlives::default();
        let first = keep_alives.stream_of(1, 5);
        assert!(Arc::ptr_eq(&first, &keep_alives.stream_of(1, 5)));
        keep_alives.stream_of(2, 5);
        assert_eq!(keep_alives.open(), 2);
        keep_alives.forget(1);
        assert_eq!(keep_alives.open(), 1);
    }

    /// A stream no renewal used since its lease ran out is closed; one renewed is kept, and
    /// one in use is kept until its renewal ends.
    #[tokio::test(start_paused = true)]
    async fn a_stream_unused_past_its_lease_is_closed() {
        let keep_alives = KeepAlives::default();
        keep_alives.stream_of(1, 3);
        keep_alives.stream_of(2, 3);
        let in_use = keep_alives.stream_of(3, 3);
        let renewal = in_use.lock().await;
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            keep_alives.stream_of(2, 3); // renewed every 2 s
        }
        assert_eq!(keep_alives.open(), 2, "lease 1 ran out unrenewed at 4 s");
        drop(renewal);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(keep_alives.open(), 0, "every lease ran out; the sweep ended");
        keep_alives.stream_of(4, 1);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(keep_alives.open(), 0, "a new stream starts another sweep");
    }
}
