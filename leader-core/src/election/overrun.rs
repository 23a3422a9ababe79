//! A per-call body that outlived its lease without renewal: said once per group.
//!
//! Without `auto_extend`, nothing renews a `run_if_leader` slot, so a body that runs past
//! `lease_time` goes on after another candidate may have taken the slot. The lease says so
//! to whoever checks it (`live_fence()` is `None`, the loss signal fired); this warning
//! tells whoever did not.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// How many groups are remembered as warned of; past that, a further group's overrun is
/// logged at debug level (a process with that many distinct groups already had its
/// warnings).
const REMEMBERED: usize = 1024;

/// Warns, the first time for `key` in this process, that a body outlived its lease.
pub(crate) fn body_outlived_its_lease(key: &str, lease_time: Duration) {
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let first = {
        let mut warned =
            WARNED.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        warned.len() < REMEMBERED && warned.insert(key.to_owned())
    };
    if first {
        tracing::warn!(
            group = %key,
            ?lease_time,
            "a run_if_leader body outlived its lease and runs on unprotected: another \
             candidate may hold the slot now. Set auto_extend(true) to renew while the body \
             runs, or a lease_time longer than the body; gate writes on lease.live_fence(). \
             Said once per group"
        );
    } else {
        tracing::debug!(group = %key, ?lease_time, "a run_if_leader body outlived its lease");
    }
}
