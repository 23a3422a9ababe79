//! Logging a store outage once, not once per retry.

use crate::error::Error;

/// Remembers whether the store is failing, so only the first failure and the recovery are
/// logged at warning and info level; the retries in between are logged at debug level.
#[derive(Debug, Default)]
pub(crate) struct OutageLog {
    failing: bool,
}

impl OutageLog {
    /// Records a failed store call of `what` (such as `"lease renewal"` for role `name`).
    pub(crate) fn failed(&mut self, name: &str, what: &str, error: &Error) {
        if std::mem::replace(&mut self.failing, true) {
            tracing::debug!(name, what, %error, "store still failing");
        } else {
            tracing::warn!(name, what, %error, "store outage: {what} failed; retrying until it is back");
        }
    }

    /// Records a successful store call.
    pub(crate) fn succeeded(&mut self, name: &str) {
        if std::mem::take(&mut self.failing) {
            tracing::info!(name, "store outage over");
        }
    }
}
