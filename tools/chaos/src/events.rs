//! What a candidate process reports, one JSON object per line on its standard output.
//! Times are microseconds since the Unix epoch: wall clock for the candidate's own
//! instants, the store's clock (Redis `TIME`, the same host here) for lease times.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One line of a candidate's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The candidate checked that it leads: it may act until its local deadline.
    Leading {
        /// When it checked (wall clock).
        at: u64,
        /// The term's fence.
        fence: u64,
        /// When the store granted the term (store clock, whole milliseconds).
        acquired_at: u64,
        /// The store's expiry of the slot as last confirmed (store clock).
        expires_at: u64,
        /// The local deadline then (wall clock): it believes it leads until this instant.
        believes_until: u64,
    },
    /// A write to the fenced register.
    Wrote {
        /// When it was sent (wall clock).
        at: u64,
        /// The fence it carried.
        fence: u64,
        /// Whether the register accepted it.
        accepted: bool,
    },
    /// The candidate found the term over.
    Ended {
        /// When it found out (wall clock).
        at: u64,
        /// The term's fence.
        fence: u64,
        /// The lease's loss reason, or `resigned`.
        reason: String,
    },
    /// The candidate is about to resign the term.
    Resigning {
        /// When it began to resign (wall clock).
        at: u64,
        /// The term's fence.
        fence: u64,
    },
    /// The candidate was told to stall before its next write but did not lead at its next
    /// check, so it will not stall (the harness picks the current holder again).
    StallDeclined {
        /// When it found it did not lead (wall clock).
        at: u64,
    },
    /// `wait_for_leadership()` handed the candidate a term.
    TermBegan {
        /// When it returned (wall clock).
        at: u64,
        /// The term's fence.
        fence: u64,
        /// The term's local deadline then (wall clock); `at` when the term was already over.
        believes_until: u64,
    },
    /// The candidate is about to stop itself (SIGSTOP) with a store reply in hand, as the
    /// lab told it to; the lab continues it.
    Stalling {
        /// When (wall clock).
        at: u64,
        /// The grant's fence (0 for a renewal).
        fence: u64,
        /// `renewal` or `grant`.
        during: String,
    },
    /// The library is about to release the slot of a grant (after a resignation, a lost
    /// term, or a grant that came too late). The checker ends the term's hold here, as it
    /// does at a resignation; the store's own samples cover the time the release takes.
    Releasing {
        /// When the release was sent (wall clock).
        at: u64,
        /// The grant's fence.
        fence: u64,
    },
    /// The candidate stopped its leadership (releasing any slot) and is exiting.
    Stopped {
        /// When (wall clock).
        at: u64,
    },
}

impl Event {
    /// When the candidate reported it (its wall clock).
    pub fn at(&self) -> u64 {
        match *self {
            Event::Leading { at, .. }
            | Event::Wrote { at, .. }
            | Event::Ended { at, .. }
            | Event::Resigning { at, .. }
            | Event::StallDeclined { at }
            | Event::TermBegan { at, .. }
            | Event::Stalling { at, .. }
            | Event::Releasing { at, .. }
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
