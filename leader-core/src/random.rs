//! The library's one source of randomness (lease tokens, holder-id suffixes, the backoff's
//! jitter, Leadership's spread of first attempts): the operating system's, or, on a thread
//! a deterministic simulation seeded with [`seed_thread`], a sequence drawn from that seed,
//! so the same seed replays the same run.

use std::cell::Cell;

thread_local! {
    /// The state of the seeded sequence of this thread, if it was seeded.
    static SEEDED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Makes every draw on this thread come from `seed` (`None`: the operating system's again).
/// For a simulation that runs one seeded scenario per thread; never for production, whose
/// lease tokens must be secret.
pub fn seed_thread(seed: Option<u64>) {
    SEEDED.with(|state| state.set(seed));
}

/// Fills `bytes` with random bytes.
pub(crate) fn fill(bytes: &mut [u8]) -> Result<(), getrandom::Error> {
    let seeded = SEEDED.with(|state| {
        let mut current = state.get()?;
        for chunk in bytes.chunks_mut(8) {
            let value = split_mix(&mut current).to_le_bytes();
            chunk.copy_from_slice(&value[..chunk.len()]);
        }
        state.set(Some(current));
        Some(())
    });
    match seeded {
        Some(()) => Ok(()),
        None => getrandom::fill(bytes),
    }
}

/// Whether this thread's draws come from a seed.
pub(crate) fn is_seeded() -> bool {
    SEEDED.with(|state| state.get().is_some())
}

/// A number in [0, 1]; `fallback` should the operating system fail.
pub(crate) fn unit(fallback: f64) -> f64 {
    let mut bytes = [0u8; 4];
    match fill(&mut bytes) {
        Ok(()) => f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX),
        Err(_) => fallback,
    }
}

/// SplitMix64: the next value of the sequence at `state`.
fn split_mix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_thread_draws_the_same_sequence_again() {
        let draw = || {
            let mut bytes = [0u8; 21];
            fill(&mut bytes).unwrap();
            bytes
        };
        seed_thread(Some(7));
        let first = (draw(), unit(2.0));
        seed_thread(Some(7));
        let again = (draw(), unit(2.0));
        seed_thread(None);
        assert_eq!(first, again);
        assert!((0.0..=1.0).contains(&first.1));
        assert_ne!(draw(), draw(), "the operating system's draws differ");
    }
}
