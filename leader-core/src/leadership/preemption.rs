//! A leader's look-out for a better candidate: with a [`priority`], the leader reads the
//! group's claim (the best waiting candidate that announced itself) now and then, and once a
//! candidate of a strictly higher priority has been seen waiting for the whole
//! `step_down_delay`, the term ends as a resignation ends it.
//!
//! [`priority`]: super::LeadershipOptions::priority

use tokio::time::{Instant, sleep};

use super::options::LeadershipSettings;
use crate::store::{ClaimInfo, LeaseStore};

/// Resolves with the candidate the leader is to step down for: one of a strictly higher
/// priority than `settings.priority`, seen waiting by every read (half a `step_down_delay`
/// apart, at most `renew_interval` apart) from a first one to one at least
/// `step_down_delay` later. So the step-down comes one to one and a half delays after the
/// candidate announced itself, and never for a candidate whose announcement (1 s) lapsed in
/// between. Never resolves for a leader without a priority. A failed read neither starts
/// nor ends the hysteresis: the next read decides.
pub(super) async fn better_candidate(
    store: &dyn LeaseStore,
    settings: &LeadershipSettings,
) -> ClaimInfo {
    let Some(own) = settings.priority.filter(|_| store.keeps_reservations()) else {
        return std::future::pending().await;
    };
    let period = (settings.step_down_delay / 2).min(settings.renew_interval);
    let mut seen_since: Option<Instant> = None;
    loop {
        sleep(period).await;
        match store.claim(&settings.key).await {
            Ok(Some(claim)) if claim.priority > own => {
                let since = *seen_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= settings.step_down_delay {
                    return claim;
                }
            }
            Ok(_) => seen_since = None,
            Err(error) => {
                tracing::debug!(role = %settings.role, %error, "could not read the group's claim");
            }
        }
    }
}
