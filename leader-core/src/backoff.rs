//! [`Backoff`]: the pause between retries after a store failure, doubling from a first
//! pause up to a ceiling; the one policy the electors, `Leadership`, slot give-backs, the
//! observers and the stores' subscriptions follow. Every pause and ceiling they use is named
//! here.

use std::time::Duration;

/// The first pause after a failure, unless a caller says otherwise.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between attempts to give a slot back while the store fails: short,
/// since a paused store may wake any moment holding a slot nobody holds.
pub(crate) const RELEASE_RETRY_CEILING: Duration = Duration::from_millis(250);

/// The first pause before a PostgreSQL statement the server rolled back (a serialization
/// failure, a deadlock) is sent again: contention passes within milliseconds.
#[cfg(feature = "postgres")]
pub(crate) const STATEMENT_RETRY_PAUSE: Duration = Duration::from_millis(1);

/// The first pause before an etcd call that failed on one member is made on the next.
#[cfg(feature = "etcd")]
pub(crate) const MEMBER_RETRY_PAUSE: Duration = Duration::from_millis(5);

/// The longest pause between attempts to make a subscription again (a notification
/// connection, an etcd watch, an observed group's announcement, an observer's read).
pub(crate) const SUBSCRIPTION_CEILING: Duration = Duration::from_secs(2);

/// How long a subscription must have lived for its loss to be met at once, its pauses
/// starting again from the first: one dropped sooner (a flapping server or network) is made
/// again after the next, longer pause.
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
pub(crate) const QUIET_PERIOD: Duration = Duration::from_secs(10);

/// Pauses that double after each failure, from `first` up to `ceiling`, until
/// [`reset`](Self::reset) after a success; with [`jittered`](Self::jittered), each is drawn
/// between half and all of that, so processes that lost one server do not all come back
/// at the same moment.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    ceiling: Duration,
    next: Duration,
    jitter: bool,
}

impl Backoff {
    /// Pauses of `first`, twice that, and so on, never more than `ceiling` (nor less than
    /// `first`, should `ceiling` be smaller).
    pub(crate) fn new(first: Duration, ceiling: Duration) -> Self {
        let ceiling = ceiling.max(first);
        Backoff { first, ceiling, next: first, jitter: false }
    }

    /// Each pause drawn at random between half and all of its nominal length.
    pub(crate) fn jittered(mut self) -> Self {
        self.jitter = true;
        self
    }

    /// The pause before the next retry; the one after it is twice as long, up to the ceiling.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = self.next.saturating_mul(2).min(self.ceiling);
        if self.jitter { pause.mul_f64(0.5 + 0.5 * unit_random()) } else { pause }
    }

    /// After a success: the next failure starts again from the first pause.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A number in [0, 1] from the operating system's random numbers (1 should they fail: the
/// pause is then its nominal length).
fn unit_random() -> f64 {
    crate::random::unit(1.0)
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

    #[test]
    fn a_jittered_pause_is_between_half_and_all_of_its_length() {
        let mut backoff = Backoff::new(FIRST_PAUSE, Duration::from_millis(400)).jittered();
        let mut pauses = Vec::new();
        for nominal in [50, 100, 200, 400, 400, 400, 400, 400, 400, 400] {
            let pause = backoff.next_pause();
            let nominal = Duration::from_millis(nominal);
            assert!(pause >= nominal / 2 && pause <= nominal, "{pause:?} for {nominal:?}");
            pauses.push(pause);
        }
        pauses.dedup();
        assert!(pauses.len() > 5, "drawn at random: {pauses:?}");
    }
}
