//! What the attribute macros' generated code calls. Not a public API: it changes with the
//! macros, which always come in the same version.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::{
    Error, LeaderGroupElectionOptions, LeaderGroupElector, LeaderRunResult, Lease, LeaseStore,
    default_holder_id, default_store,
};

/// The options a macro call site was written with, checked at compile time.
#[derive(Debug, Clone, Copy)]
pub struct MacroOptions {
    /// `max_leaders`; 1 for `#[leader_election]`.
    pub max_leaders: u32,
    /// `wait_time` in milliseconds.
    pub wait_ms: u64,
    /// `lease_time` in milliseconds.
    pub lease_ms: u64,
    /// `min_lease_time` in milliseconds.
    pub min_lease_ms: u64,
    /// `auto_extend`.
    pub auto_extend: bool,
    /// `holder_id`, or the process's default.
    pub holder_id: Option<&'static str>,
    /// `on_store_error = "skip"`.
    pub skip_on_store_error: bool,
}

/// A store given as `store = <expr>`.
pub fn shared_store<S: LeaseStore + 'static>(store: S) -> Arc<dyn LeaseStore> {
    Arc::new(store)
}

/// One holder id per process for macro-wrapped functions: `hostname:pid:random`.
fn process_holder_id() -> &'static str {
    static HOLDER: OnceLock<String> = OnceLock::new();
    HOLDER.get_or_init(default_holder_id)
}

/// Runs `body` under a slot of group `name`, as `run_if_leader` does.
pub async fn run<F, Fut, T>(
    store: Option<Arc<dyn LeaseStore>>,
    options: &MacroOptions,
    name: &str,
    body: F,
) -> Result<LeaderRunResult<T>, Error>
where
    F: FnOnce(Lease) -> Fut,
    Fut: Future<Output = T>,
{
    let store = store.or_else(default_store).ok_or(Error::NoDefaultStore)?;
    let elector_options = LeaderGroupElectionOptions::new(options.max_leaders)
        .wait_time(Duration::from_millis(options.wait_ms))
        .lease_time(Duration::from_millis(options.lease_ms))
        .min_lease_time(Duration::from_millis(options.min_lease_ms))
        .auto_extend(options.auto_extend)
        .holder_id(options.holder_id.unwrap_or_else(process_holder_id));
    let elector = LeaderGroupElector::from_shared_store(store, elector_options)?;
    match elector.run_if_leader(name, body).await {
        Err(error) if options.skip_on_store_error && error.is_store_failure() => {
            tracing::warn!(group = name, %error, "store failed; skipping as on_store_error = \"skip\" asks");
            Ok(LeaderRunResult::Skipped)
        }
        result => result,
    }
}
