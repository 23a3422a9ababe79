//! A leader's look-out for a better candidate: with a [`priority`], the leader reads the
//! group's claim (the best waiting candidate that announced itself) now and then, and once a
//! better candidate (the holder an operator [prefers], or else one of a strictly higher
//! priority) has been seen waiting for the whole `step_down_delay`, the term ends as a
//! resignation ends it.
//!
//! [`priority`]: super::LeadershipOptions::priority
//! [prefers]: crate::LeaderGroupElector::prefer

use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::options::LeadershipSettings;
use crate::store::{ClaimInfo, LeaseStore};
use crate::telemetry;

/// How far a claim's end must have moved between the first read that saw a better
/// candidate and a later one, beyond the store's [expiry
/// resolution](crate::LeaseStore::expiry_resolution) (etcd's whole seconds), for that
/// candidate to count as still waiting: more than the reads' own error (a round trip, the
/// store's clock in whole milliseconds).
const RENEWED_BY: Duration = Duration::from_millis(50);

/// Resolves with the candidate the leader is to step down for: one that [goes
/// before](goes_before) this leader (of `settings.priority`), seen waiting by every read
/// (half a `step_down_delay` apart, at most `renew_interval` apart) from a first one to one
/// at least
/// `step_down_delay` later, whose claim was kept alive in between (its end moved on: a
/// waiting candidate asks again every 500 ms). So the step-down comes one to one and a half
/// delays after the candidate announced itself, and never for a candidate that stopped
/// asking after the first read (it died, or was paused), nor for a claim nobody keeps alive
/// (an operator's write, however long it says it lives). Never resolves for a leader
/// without a priority. A failed read neither starts nor ends the hysteresis: the next read
/// decides.
pub(super) async fn better_candidate(
    store: &dyn LeaseStore,
    settings: &LeadershipSettings,
) -> ClaimInfo {
    let Some(own) = settings.priority.filter(|_| store.keeps_reservations()) else {
        return std::future::pending().await;
    };
    let period = (settings.step_down_delay / 2).min(settings.renew_interval);
    let renewed_by = RENEWED_BY + store.expiry_resolution();
    // When a better candidate was first seen, and when its claim was to end then.
    let mut first_seen: Option<(Instant, Instant)> = None;
    loop {
        sleep(period).await;
        // Counted from when the read was sent: the store read the claim after that, so its
        // end is no later than this says, and a late reply (a stalled task) never makes a
        // claim nobody keeps alive look renewed.
        let sent = Instant::now();
        match telemetry::claim(store, &settings.key).await {
            Ok(Some(claim)) if goes_before(&claim, own, &settings.holder_id) => {
                let ends = sent + claim.expires_in;
                let (since, ended) = *first_seen.get_or_insert((sent, ends));
                if sent - since >= settings.step_down_delay && ends > ended + renewed_by {
                    return claim;
                }
            }
            Ok(_) => first_seen = None,
            Err(error) => {
                tracing::debug!(role = %settings.role, %error, "could not read the group's claim");
            }
        }
    }
}

/// Whether the waiting candidate `claim` goes before a leader of priority `own` whose
/// holder id is `holder`: never while an operator prefers the leader itself; always when the
/// operator prefers the candidate; otherwise when its priority is strictly higher.
fn goes_before(claim: &ClaimInfo, own: i32, holder: &str) -> bool {
    match claim.preference.as_deref() {
        Some(preferred) if preferred == holder => false,
        Some(_) if claim.is_preferred() => true,
        _ => claim.priority > own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preference_goes_before_priorities_and_shields_the_preferred_leader() {
        let second = Duration::from_secs(1);
        let waiting = |priority| ClaimInfo::new("b".to_owned(), priority, second, second);
        assert!(goes_before(&waiting(2), 1, "a"));
        assert!(!goes_before(&waiting(1), 1, "a"));
        assert!(goes_before(&waiting(0).with_preference(Some("b".to_owned())), 5, "a"));
        assert!(!goes_before(&waiting(9).with_preference(Some("a".to_owned())), 1, "a"));
        assert!(goes_before(&waiting(9).with_preference(Some("c".to_owned())), 1, "a"));
        assert!(!goes_before(&waiting(1).with_preference(Some("c".to_owned())), 1, "a"));
    }
}
