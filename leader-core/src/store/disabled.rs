//! [`DisabledStore`]: a store that does not coordinate, for local development.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::{
    AcquireOutcome, AcquireRequest, Grant, GroupSignal, GroupSnapshot, GroupWatch, LeaseStore,
    ReleaseOutcome, RenewOutcome,
};
use crate::error::Error;
use crate::token::LeaseToken;

/// A store that coordinates nothing: every acquire is granted (fence 0), every renewal
/// succeeds, nothing is kept.
///
/// Use it to run a service alone, without Redis. Per-call electors over it run every body;
/// long-lived [`Leadership`](crate::Leadership) notices that it does not coordinate and
/// follows `when_uncoordinated` (by default it never leads, so replicas started by mistake
/// against it cannot all lead).
#[derive(Debug, Clone, Copy, Default)]
pub struct DisabledStore;

#[async_trait]
impl LeaseStore for DisabledStore {
    fn kind(&self) -> &'static str {
        "disabled"
    }

    fn coordinates(&self) -> bool {
        false
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
        let now = SystemTime::now();
        Ok(AcquireOutcome::Granted(Grant {
            fence: 0,
            acquired_at: now,
            expires_at: now + request.lease_time,
            expires_in: request.lease_time,
        }))
    }

    async fn renew(
        &self,
        _: &str,
        _: LeaseToken,
        lease_time: Duration,
    ) -> Result<RenewOutcome, Error> {
        Ok(RenewOutcome::Renewed {
            expires_at: SystemTime::now() + lease_time,
            expires_in: lease_time,
        })
    }

    async fn release(&self, _: &str, _: LeaseToken, _: Duration) -> Result<ReleaseOutcome, Error> {
        Ok(ReleaseOutcome::Released)
    }

    async fn state(&self, _: &str) -> Result<GroupSnapshot, Error> {
        Ok(GroupSnapshot::default())
    }

    async fn watch_releases(&self, _: &str) -> Result<GroupWatch, Error> {
        // Nothing is ever released here; the signal is dropped, so the watch never fires.
        Ok(GroupSignal::new().watch())
    }

    async fn watch_changes(&self, _: &str) -> Result<GroupWatch, Error> {
        // Nothing is ever held here (state is always empty), so nothing ever changes.
        Ok(GroupSignal::new().watch())
    }
}
