//! [`Bound`]: the one deadline of a store operation, the one way a store times a call out,
//! naming the operation (as deadpool's `apply_timeout` does for its pools), and the one
//! retry loop of a store call ([`Bound::retry`]): a store supplies one attempt and says what
//! each failure leaves to do ([`Then`]); the loop, its pauses and its log line live here.

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
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
    /// limit) if the deadline passes first; `call` is dropped then. (A combinator, not an
    /// `async fn`, which would keep `call` twice in its future.)
    pub(crate) fn run<F: Future>(&self, call: F) -> impl Future<Output = Result<F::Output, Error>> {
        let bound = *self;
        futures_util::FutureExt::map(tokio::time::timeout_at(self.deadline, call), move |done| {
            done.map_err(|_| bound.timed_out())
        })
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
    fn leaves(&self, pause: Duration) -> bool {
        Instant::now() + pause < self.deadline
    }

    /// Makes `attempt` until it answers, gives up, or the deadline leaves no time for
    /// another: again at once after a [`Then::AtOnce`] failure (or [`Error::Timeout`] if
    /// the deadline has passed), after a pause of `first_pause` (doubling each time) after
    /// a [`Then::AfterPause`] one (or that failure's error if the pause would end after
    /// the deadline), never after a [`Then::Stop`] one (its error). Each attempt learns
    /// how many came before it ([`Tries`]) and runs its own calls within this deadline
    /// ([`run`](Self::run)), so it can clean up after one that timed out (cancel a
    /// statement, drop a connection that did not answer).
    pub(crate) async fn retry<T, Attempt>(
        &self,
        first_pause: Duration,
        mut attempt: impl FnMut(Tries) -> Attempt,
    ) -> Result<T, Error>
    where
        Attempt: Future<Output = Result<T, Failed>>,
    {
        let mut tries = Tries { made: 0, at_once: 0 };
        let mut pauses = Backoff::new(first_pause, Duration::MAX);
        loop {
            let failed = match attempt(tries).await {
                Ok(answer) => return Ok(answer),
                Err(failed) => failed,
            };
            tries.made += 1;
            match failed.then {
                Then::AtOnce if self.leaves(Duration::ZERO) => tries.at_once += 1,
                // The call would have been made again had time been left: the operation
                // did not answer in time (a paused server's reply timeout, say).
                Then::AtOnce => return Err(self.timed_out()),
                Then::AfterPause => {
                    let pause = pauses.next_pause();
                    if !self.leaves(pause) {
                        return Err(failed.error);
                    }
                    tracing::debug!(store = self.store, operation = self.operation, error = %failed.error, ?pause, "store call failed; trying again");
                    tokio::time::sleep(pause).await;
                    continue;
                }
                _ => return Err(failed.error),
            }
            tracing::debug!(store = self.store, operation = self.operation, error = %failed.error, "store call failed; trying again at once");
        }
    }
}

/// The attempts of a [`Bound::retry`] made before this one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tries {
    /// Attempts made so far (0 for the first).
    #[cfg_attr(not(any(feature = "redis", feature = "etcd")), allow(dead_code))]
    pub(crate) made: u32,
    /// How many of them were followed at once by another ([`Then::AtOnce`]).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) at_once: u32,
}

/// A failed attempt of a [`Bound::retry`]: its error, and what it leaves to do.
#[derive(Debug)]
pub(crate) struct Failed {
    /// What the operation returns should it go no further.
    pub(crate) error: Error,
    /// Whether another attempt follows.
    pub(crate) then: Then,
}

impl Failed {
    /// A failure after which the operation gives up with `error`.
    pub(crate) fn stop(error: Error) -> Self {
        Failed { error, then: Then::Stop }
    }
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed::stop(error)
    }
}

/// What a failed attempt leaves to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Try again at once (on a new connection, on the next member), if the deadline has
    /// not passed.
    AtOnce,
    /// Try again after the next pause, if it ends before the deadline.
    #[cfg_attr(not(any(feature = "postgres", feature = "etcd")), allow(dead_code))]
    AfterPause,
    /// Give up with the error.
    Stop,
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

    fn unavailable() -> Error {
        Error::Unavailable {
            store: "redis",
            endpoint: String::new(),
            operation: "acquire",
            cause: "refused".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_pauses_doubling_until_the_deadline_leaves_no_room_for_the_next_pause() {
        let bound = Bound::new("postgres", "acquire", Duration::from_millis(100));
        let start = Instant::now();
        let mut starts = Vec::new();
        let failed = bound
            .retry(Duration::from_millis(10), |tries| {
                starts.push((tries.made, start.elapsed().as_millis()));
                async { Err::<(), _>(Failed { error: unavailable(), then: Then::AfterPause }) }
            })
            .await
            .unwrap_err();
        assert!(matches!(failed, Error::Unavailable { .. }), "the last attempt's error");
        // Attempts at 0, 10, 30, 70 ms; the next pause (80 ms) would end after 100 ms.
        assert_eq!(starts, [(0, 0), (1, 10), (2, 30), (3, 70)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_goes_on_at_once_when_asked_and_stops_at_the_first_stop() {
        let bound = Bound::new("redis", "acquire", Duration::from_secs(1));
        let mut seen = Vec::new();
        let answer = bound
            .retry(Duration::from_secs(10), |tries| {
                seen.push((tries.made, tries.at_once));
                async move {
                    match tries.made {
                        0 | 1 => Err(Failed { error: unavailable(), then: Then::AtOnce }),
                        _ => Ok(7),
                    }
                }
            })
            .await;
        assert_eq!(answer.unwrap(), 7);
        assert_eq!(seen, [(0, 0), (1, 1), (2, 2)]);

        let mut attempts = 0;
        let stopped = bound
            .retry(Duration::ZERO, |_| {
                attempts += 1;
                async { Err::<(), _>(Failed::stop(bound.timed_out())) }
            })
            .await;
        assert!(matches!(stopped, Err(Error::Timeout { .. })));
        assert_eq!(attempts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn no_attempt_at_once_after_the_deadline() {
        let bound = Bound::new("etcd", "renew", Duration::from_millis(50));
        let mut attempts = 0;
        let failed = bound
            .retry(Duration::ZERO, |_| {
                attempts += 1;
                async {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    Err::<(), _>(Failed { error: unavailable(), then: Then::AtOnce })
                }
            })
            .await;
        assert!(matches!(failed, Err(Error::Timeout { operation: "renew", .. })), "{failed:?}");
        assert_eq!(attempts, 2, "the second ends after the deadline");
    }
}
