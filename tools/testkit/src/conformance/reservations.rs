//! Reservations (fair waiting): the last free slot kept for the waiter that arrived first,
//! a claim taken over only by an earlier arrival (which takes a free slot with it), and a
//! claim that lapses by itself.

use std::time::Duration;

use leader_core::LeaseStore;
use leader_core::store::AcquireOutcome;
use tokio::time::sleep;

use super::{LIVE, granted, lease, live, past_expiry, request, token};

/// How long a refused claim says it has waited: far apart, so the store's clock and the
/// time between two requests never reorder them.
const WAITED_LONG: Duration = Duration::from_secs(20);
const WAITED_SHORT: Duration = Duration::from_secs(5);

/// The rule: A reservation keeps the last free slot for the earliest waiter, on `key` of
/// `store`. A store that keeps no reservations must grant as if none was asked for.
pub async fn a_reservation_keeps_the_last_free_slot_for_the_earliest_waiter<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let (holder, late, early) = (token(), token(), token());
    granted(store, live(key, 1, holder)).await;
    // The first claim is the late waiter's, until the earlier one takes it over.
    let claims =
        [(late, WAITED_SHORT, true), (early, WAITED_LONG, true), (late, WAITED_SHORT, false)];
    for (waiter, waited, holds_the_claim) in claims {
        let outcome = store.acquire(live(key, 1, waiter).reserving(waited, LIVE)).await.unwrap();
        let AcquireOutcome::Full { nearest_expiry } = outcome else {
            panic!("a full group granted {outcome:?}")
        };
        // The claim's holder is told to ask again within half its claim's life; another
        // waiter learns the slot's expiry.
        let told_sooner = nearest_expiry <= LIVE / 2;
        assert_eq!(
            told_sooner,
            holds_the_claim && store.keeps_reservations(),
            "{nearest_expiry:?}"
        );
    }
    store.release(key, holder, Duration::ZERO).await.unwrap();
    if !store.keeps_reservations() {
        granted(store, live(key, 1, late)).await;
        return;
    }
    // The slot is kept for the earliest arrival, whatever the later one or a newcomer asks.
    for other in [token(), late] {
        match store.acquire(live(key, 1, other)).await.unwrap() {
            AcquireOutcome::Full { nearest_expiry } => assert!(
                nearest_expiry > Duration::ZERO && nearest_expiry <= LIVE,
                "the reservation's time left: {nearest_expiry:?}"
            ),
            granted => panic!("a slot kept for another waiter was granted: {granted:?}"),
        }
    }
    let fence = granted(store, live(key, 1, early)).await.fence;
    store.release(key, early, Duration::ZERO).await.unwrap();
    // The claim ended with its grant: the next free slot goes to whoever asks first.
    assert!(granted(store, live(key, 1, late)).await.fence > fence);
    // A claim on a free slot taken over by an earlier arrival takes the slot at once.
    let newcomer = token();
    let outcome = store.acquire(live(key, 1, newcomer).reserving(WAITED_SHORT, LIVE)).await;
    assert!(matches!(outcome.unwrap(), AcquireOutcome::Full { .. }));
    store.release(key, late, Duration::ZERO).await.unwrap();
    granted(store, live(key, 1, token()).reserving(WAITED_LONG, LIVE)).await;
}

/// The rule: A reservation lapses by itself and never holds back a second free slot, on
/// `key` of `store`.
pub async fn a_reservation_lapses_and_never_holds_back_a_second_free_slot<
    S: LeaseStore + Clone + 'static,
>(
    store: &S,
    key: &str,
) {
    let (first, second, waiter) = (token(), token(), token());
    granted(store, live(key, 2, first)).await;
    granted(store, live(key, 2, second)).await;
    let claim = live(key, 2, waiter).reserving(WAITED_LONG, lease());
    assert!(matches!(store.acquire(claim).await.unwrap(), AcquireOutcome::Full { .. }));
    store.release(key, first, Duration::ZERO).await.unwrap();
    store.release(key, second, Duration::ZERO).await.unwrap();
    // Two free slots, one claimed: the other is anyone's, and then the claim holds its own.
    granted(store, live(key, 2, token())).await;
    let held_back = store.acquire(live(key, 2, token())).await.unwrap();
    if store.keeps_reservations() {
        assert!(matches!(held_back, AcquireOutcome::Full { .. }), "{held_back:?}");
        // The waiter never came back: its claim lapses, and the slot is anyone's again.
        sleep(past_expiry(lease())).await;
        granted(store, request(key, 2, token())).await;
    } else {
        assert!(matches!(held_back, AcquireOutcome::Granted(_)), "{held_back:?}");
    }
}
