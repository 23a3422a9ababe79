//! [`Backoff`]: the pause between retries after a store failure, doubling from a first
//! pause up to a ceiling; the one policy the electors, `Leadership`, slot give-backs and the
//! stores' listeners follow.

use std::time::Duration;

/// The first pause after a failure, unless a caller says otherwise.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// Pauses that double after each failure, from `first` up to `ceiling`, until
/// [`reset`](Self::reset) after a success.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    ceiling: Duration,
    next: Duration,
}

impl Backoff {
    /// Pauses of `first`, twice that, and so on, never more than `ceiling` (nor less than
    /// `first`, should `ceiling` be smaller).
    pub(crate) fn new(first: Duration, ceiling: Duration) -> Self {
        let ceiling = ceiling.max(first);
        Backoff { first, ceiling, next: first }
    }

    /// The pause before the next retry; the one after it is twice as long, up to the ceiling.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = self.next.saturating_mul(2).min(self.ceiling);
        pause
    }

    /// After a success: the next failure starts again from the first pause.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_ceiling_and_starts_again_after_a_success() {
        let mut backoff = Backoff::new(FIRST_PAUSE, Duration::from_millis(300));
        let pauses: Vec<u128> = (0..5).map(|_| backoff.next_pause().as_millis()).collect();
        assert_eq!(pauses, [50, 100, 200, 300, 300]);
        backoff.reset();
        assert_eq!(backoff.next_pause(), FIRST_PAUSE);
        let mut small = Backoff::new(FIRST_PAUSE, Duration::from_millis(10));
        assert_eq!([small.next_pause(), small.next_pause()], [FIRST_PAUSE, FIRST_PAUSE]);
    }
}
