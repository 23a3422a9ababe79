//! [`keep`]: the one driver of a store's subscriptions (the notification connection of
//! Redis and PostgreSQL, an etcd group's watch). A store supplies only its
//! [`Subscription`]: how to open one, how to follow it until it is lost, and what its loss
//! and return wake. The policy is here, once:
//!
//! - a subscription that lived [`QUIET_PERIOD`] or longer is made again at once when lost;
//!   one dropped sooner (a flapping server or network) after the next pause of a jittered
//!   [`Backoff`] (50 ms doubling to 2 s), which starts again from the first pause only
//!   after a subscription has lived a quiet period;
//! - a failed attempt is tried again after the next pause;
//! - observers are woken at the loss and after each failed attempt (they read the state,
//!   so a change or the store's failure is reported, never hidden behind silence), and
//!   everyone once the subscription is back, since events may have been missed; waiters
//!   keep their expiry timers throughout.

use std::fmt::Display;

use tokio::time::Instant;

use crate::backoff::{Backoff, FIRST_PAUSE, QUIET_PERIOD, SUBSCRIPTION_CEILING};

/// What a store subscribes to, for [`keep`].
pub(crate) trait Subscription: Send + Sync {
    /// A live subscription, delivering its events for as long as it lives.
    type Live: Send;
    /// Why one could not be made.
    type Error: Display + Send;

    /// What the subscription is called in logs: "PostgreSQL LISTEN connection".
    fn name(&self) -> String;

    /// Makes the subscription again (the `attempt`-th time since it began), ready to
    /// deliver when it returns.
    fn open(&self, attempt: usize) -> impl Future<Output = Result<Self::Live, Self::Error>> + Send;

    /// Follows `live` until it has ended or stopped answering; returns why.
    fn until_lost(&self, live: &mut Self::Live) -> impl Future<Output = String> + Send;

    /// It was lost (called before it is made again): wake what must read the state now.
    fn lost(&self);

    /// An attempt to make it again failed: wake what must read the state now.
    fn failed(&self);

    /// It is back: wake everyone, since events may have been missed.
    fn restored(&self);
}

/// Keeps `first`, and each subscription made after it, for as long as the caller polls this
/// (it never returns: a store ends it by dropping or aborting the task that runs it).
pub(crate) async fn keep<S: Subscription>(source: &S, first: S::Live) {
    let mut backoff = Backoff::new(FIRST_PAUSE, SUBSCRIPTION_CEILING).jittered();
    let mut live = first;
    let mut attempt = 0;
    loop {
        let since = Instant::now();
        let reason = source.until_lost(&mut live).await;
        drop(live);
        tracing::warn!(
            subscription = %source.name(),
            %reason,
            "lost; waiters fall back to expiry timers until it is back"
        );
        source.lost();
        if since.elapsed() >= QUIET_PERIOD {
            backoff.reset();
        } else {
            tokio::time::sleep(backoff.next_pause()).await;
        }
        live = loop {
            attempt += 1;
            match source.open(attempt).await {
                Ok(live) => {
                    tracing::info!(subscription = %source.name(), "restored");
                    source.restored();
                    break live;
                }
                Err(error) => {
                    let pause = backoff.next_pause();
                    tracing::debug!(subscription = %source.name(), %error, ?pause, "reconnect failed");
                    source.failed();
                    tokio::time::sleep(pause).await;
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// A subscription whose every connection lives `lives`, recording when each was made.
    struct Flapping {
        lives: Duration,
        made: Mutex<Vec<Instant>>,
    }

    impl Subscription for Flapping {
        type Live = ();
        type Error = String;

        fn name(&self) -> String {
            "flapping".into()
        }

        async fn open(&self, _: usize) -> Result<(), String> {
            self.made.lock().unwrap().push(Instant::now());
            Ok(())
        }

        async fn until_lost(&self, _: &mut ()) -> String {
            tokio::time::sleep(self.lives).await;
            "dropped".into()
        }

        fn lost(&self) {}
        fn failed(&self) {}
        fn restored(&self) {}
    }

    async fn made_within(lives: Duration, window: Duration) -> usize {
        let source = Flapping { lives, made: Mutex::default() };
        let _ = tokio::time::timeout(window, keep(&source, ())).await;
        source.made.lock().unwrap().len()
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscription_dropped_at_once_is_made_again_with_growing_pauses() {
        // Pauses of 50, 100, 200, 400, 800, 1600, 2000, 2000… ms: 9 in 10 s; 14 were every
        // pause half its length; not one every few milliseconds.
        let made = made_within(Duration::from_millis(1), Duration::from_secs(10)).await;
        assert!((9..=14).contains(&made), "{made} made in 10 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscription_that_lived_a_quiet_period_is_made_again_at_once() {
        let source = Flapping { lives: QUIET_PERIOD, made: Mutex::default() };
        let _ =
            tokio::time::timeout(QUIET_PERIOD * 3 + Duration::from_millis(1), keep(&source, ()))
                .await;
        let made = source.made.lock().unwrap().clone();
        assert_eq!(made.len(), 3, "{made:?}");
        let gaps: Vec<Duration> = made.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|gap| *gap == QUIET_PERIOD), "no pause: {gaps:?}");
    }
}
