//! What a [`Leadership`](crate::Leadership) reports: its status, and its composition.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::options::WhenUncoordinated;
use crate::error::Error;

/// A leadership's state, as [`Leadership::subscribe`](crate::Leadership::subscribe) reports
/// every change of it.
#[derive(Debug, Clone, Default)]
pub struct LeadershipStatus {
    /// Whether the background loop holds one of the role's slots. Before acting, prefer
    /// [`Leadership::is_leader`](crate::Leadership::is_leader), which also checks the
    /// term's local deadline.
    pub is_leader: bool,
    /// How many terms this instance has begun (its acquisitions); not a fencing token.
    pub term: u64,
    /// The store's fencing token of the current term, while leading.
    pub fence: Option<u64>,
    /// Whether the store coordinates (false over a `DisabledStore`).
    pub coordinated: bool,
    /// Whether the leadership was stopped; it will not lead again.
    pub stopped: bool,
    /// Why this instance cannot stand for election, while the store refuses it for a
    /// reason only a change of configuration helps: an option the store cannot keep (an
    /// etcd `lease_time` below the cluster's minimum TTL), credentials, a missing
    /// permission, a group of another `max_leaders`, a key holding other data. The loop
    /// keeps trying; the next answer that is not such a refusal clears it. A store that is
    /// only unreachable is not a failure here (it is logged once per outage).
    pub failure: Option<Arc<Error>>,
}

/// Equal when every field is, the failure by identity (the same report of the same error).
impl PartialEq for LeadershipStatus {
    fn eq(&self, other: &Self) -> bool {
        let same_failure = match (&self.failure, &other.failure) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        (self.is_leader, self.term, self.fence, self.coordinated, self.stopped)
            == (other.is_leader, other.term, other.fence, other.coordinated, other.stopped)
            && same_failure
    }
}

impl Eq for LeadershipStatus {}

/// Whether a leadership is healthy, for liveness probes (in the manner of client-go's
/// `HealthzAdaptor`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeadershipHealth {
    /// Not leading, or leading with a renewal younger than the lease.
    Healthy,
    /// Believes it leads, but the store last confirmed the slot longer ago than the lease:
    /// the renewal loop is stuck (a starved runtime, a blocked thread). Restart the instance.
    Wedged {
        /// Time since the last successful grant or renewal.
        since_confirmed: Duration,
        /// The lease time it exceeded.
        lease_time: Duration,
    },
    /// Cannot stand for election: the store refuses it for a reason only a change of
    /// configuration helps (see [`LeadershipStatus::failure`]).
    Failing {
        /// The store's refusal.
        error: Arc<Error>,
    },
}

impl LeadershipHealth {
    /// Whether the probe should pass.
    pub fn is_healthy(&self) -> bool {
        matches!(self, LeadershipHealth::Healthy)
    }
}

/// Equal when of the same kind with the same values, a failure by identity.
impl PartialEq for LeadershipHealth {
    fn eq(&self, other: &Self) -> bool {
        use LeadershipHealth::*;
        match (self, other) {
            (Healthy, Healthy) => true,
            (
                Wedged { since_confirmed: a, lease_time: b },
                Wedged { since_confirmed: c, lease_time: d },
            ) => (a, b) == (c, d),
            (Failing { error: a }, Failing { error: b }) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for LeadershipHealth {}

/// The composition of a leadership, for logs and health endpoints; made without touching
/// the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeadershipDescription {
    /// The role.
    pub role: String,
    /// The role's resolved store key.
    pub key: String,
    /// The store's kind, such as `memory` or `redis`.
    pub store: &'static str,
    /// Whether the store coordinates.
    pub coordinated: bool,
    /// What happens when it does not.
    pub when_uncoordinated: WhenUncoordinated,
    /// Slots of the role's group.
    pub max_leaders: u32,
    /// This instance's id.
    pub holder_id: String,
    /// The lease time of a term.
    pub lease_time: Duration,
    /// The renewal cadence.
    pub renew_interval: Duration,
    /// The candidates' retry cadence.
    pub retry_interval: Duration,
    /// The most jitter added to a retry.
    pub retry_jitter: Duration,
}

impl fmt::Display for LeadershipDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "role `{}` on {} store key `{}` ({} of {} slots as `{}`): lease time {:?}, renew every {:?}, \
             retry every {:?} + up to {:?}",
            self.role,
            self.store,
            self.key,
            if self.coordinated { "one" } else { "uncoordinated, one" },
            self.max_leaders,
            self.holder_id,
            self.lease_time,
            self.renew_interval,
            self.retry_interval,
            self.retry_jitter
        )
    }
}
