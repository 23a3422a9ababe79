//! What a candidate process reports, one JSON object per line on its standard output.
//! Times are microseconds since the Unix epoch: wall clock for the candidate's own
//! instants, the store's clock (Redis `TIME`, the same host here) for lease times.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One line of a candidate's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The candidate checked, at `at`, that it leads with `fence`: it may act until
    /// `believes_until` (its local deadline); the store's expiry was `expires_at`.
    Leading { at: u64, fence: u64, acquired_at: u64, expires_at: u64, believes_until: u64 },
    /// A write to the fenced register, sent at `at`, and whether it was accepted.
    Wrote { at: u64, fence: u64, accepted: bool },
    /// The candidate found, at `at`, that the term with `fence` ended (`reason` from the
    /// lease, or `resigned`).
    Ended { at: u64, fence: u64, reason: String },
    /// The candidate is about to resign the term with `fence`.
    Resigning { at: u64, fence: u64 },
    /// The candidate stopped its leadership (releasing any slot) and is exiting.
    Stopped { at: u64 },
}

impl Event {
    /// When the candidate reported it (its wall clock).
    pub fn at(&self) -> u64 {
        match *self {
            Event::Leading { at, .. }
            | Event::Wrote { at, .. }
            | Event::Ended { at, .. }
            | Event::Resigning { at, .. }
            | Event::Stopped { at } => at,
        }
    }
}

/// Now, in microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    micros(SystemTime::now())
}

/// `time` in microseconds since the Unix epoch.
pub fn micros(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_micros() as u64)
}
