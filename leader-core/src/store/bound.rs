//! [`Bound`]: the one deadline of a store operation, and the one way a store times a call
//! out, naming the operation (as deadpool's `apply_timeout` does for its pools).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;

/// The deadline of one store operation: every call the operation makes (getting a
/// connection, the statement or script, a retry, a diagnosis) runs within it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    store: &'static str,
    operation: &'static str,
    limit: Duration,
    deadline: Instant,
}

impl Bound {
    /// `operation` of `store`, which may take `limit` from now.
    pub(crate) fn new(store: &'static str, operation: &'static str, limit: Duration) -> Self {
        Bound { store, operation, limit, deadline: Instant::now() + limit }
    }

    /// `call`'s output, or [`Error::Timeout`] (naming the store, the operation and the
    /// limit) if the deadline passes first; `call` is dropped then.
    pub(crate) async fn run<T>(&self, call: impl Future<Output = T>) -> Result<T, Error> {
        tokio::time::timeout_at(self.deadline, call).await.map_err(|_| self.timed_out())
    }

    /// The error of an operation that outlived its deadline.
    pub(crate) fn timed_out(&self) -> Error {
        Error::Timeout {
            store: self.store,
            endpoint: String::new(),
            operation: self.operation,
            after: self.limit,
        }
    }

    /// The time left until the deadline.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The operation this bounds, for errors and logs.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn operation(&self) -> &'static str {
        self.operation
    }

    /// Whether `pause` from now still ends before the deadline.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn leaves(&self, pause: Duration) -> bool {
        Instant::now() + pause < self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_deadline_for_every_call_of_the_operation() {
        let bound = Bound::new("redis", "acquire", Duration::from_secs(1));
        let first = bound.run(tokio::time::sleep(Duration::from_millis(700))).await;
        assert!(first.is_ok());
        assert!(!bound.leaves(Duration::from_millis(400)));
        let second = bound.run(tokio::time::sleep(Duration::from_millis(700))).await;
        let err = second.unwrap_err();
        assert!(matches!(err, Error::Timeout { operation: "acquire", .. }), "{err:?}");
        assert_eq!(err.to_string(), "redis store did not answer acquire within 1s");
    }
}
