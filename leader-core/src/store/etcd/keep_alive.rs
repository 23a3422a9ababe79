//! [`KeepAlives`]: one keep-alive stream per lease. etcd-client opens a bidirectional gRPC
//! stream with every `keep_alive()` call; the store keeps the stream it opened for a lease
//! and sends each renewal on it, opening another (on the next member, after a failure) only
//! when it broke.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};

use super::EtcdStore;
use super::members::lease_not_found;
use crate::error::Error;
use crate::store::bound::Bound;

/// How many leases' streams a store keeps before it lets them all go (they are opened again
/// on their next renewal).
const KEPT: usize = 4096;

/// An open keep-alive stream: what sends, what answers, and the member it is open on.
struct Stream {
    keeper: LeaseKeeper,
    replies: LeaseKeepAliveStream,
    member: usize,
}

/// The open streams of one store, by lease. Each lease's stream is used by one renewal at a
/// time (its lock), so every reply answers the request sent just before it.
#[derive(Default)]
pub(crate) struct KeepAlives {
    by_lease: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<Option<Stream>>>>>,
}

impl KeepAlives {
    fn stream_of(&self, lease: i64) -> Arc<tokio::sync::Mutex<Option<Stream>>> {
        let mut by_lease = self.by_lease.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if by_lease.len() >= KEPT && !by_lease.contains_key(&lease) {
            by_lease.clear();
        }
        by_lease.entry(lease).or_default().clone()
    }

    /// Closes `lease`'s stream, if one is open (the lease is revoked, expired or let go).
    pub(crate) fn forget(&self, lease: i64) {
        self.by_lease.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&lease);
    }

    /// How many streams are open, for tests.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.by_lease.lock().unwrap().len()
    }
}

impl EtcdStore {
    /// Keeps `lease` alive: `Ok(true)` when it was, `Ok(false)` when it is gone. Sent on the
    /// lease's open stream, which has its share of the time left (as a call to one member
    /// has); a stream that fails or does not answer in it is closed, its member left for
    /// the next, and a new stream opened there (its opening is the renewal).
    pub(crate) async fn keep_alive(&self, bound: &Bound, lease: i64) -> Result<bool, Error> {
        let keep_alives = &self.inner.keep_alives;
        let members = &self.inner.members;
        let stream = keep_alives.stream_of(lease);
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

    #[test]
    fn streams_are_kept_by_lease_and_forgotten() {
        let keep_alives = KeepAlives::default();
        let first = keep_alives.stream_of(1);
        assert!(Arc::ptr_eq(&first, &keep_alives.stream_of(1)));
        keep_alives.stream_of(2);
        assert_eq!(keep_alives.open(), 2);
        keep_alives.forget(1);
        assert_eq!(keep_alives.open(), 1);
    }
}
