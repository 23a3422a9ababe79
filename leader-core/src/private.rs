//! What the attribute macros' generated code calls. Not a public API: it changes with the
//! macros, which always come in the same version.

use std::sync::{Arc, OnceLock};

use crate::default_store;
use crate::election::{LeaderGroupElectionOptions, LeaderGroupElector, LeaderRunResult, Lease};
use crate::error::Error;
use crate::holder::default_holder_id;
use crate::store::{IntoSharedStore, LeaseStore};

pub use crate::duration::parse as parse_duration;
pub use crate::key::check_name;

/// What a wrapped fn returns: implemented once for every type, and once more for futures
/// and for streams. Asking which implementation a type uses is ambiguous, so a compile error
/// (E0283, listing these implementations), exactly when the type is a future or a stream.
pub trait WrappedFnReturns<Kind> {}

/// The implementation every type has.
pub struct NeitherAFutureNorAStream;
/// The implementation a future has: it would run after the slot was released.
pub struct AFutureThatWouldRunAfterTheSlotIsReleased;
/// The implementation a stream has: it would be consumed after the slot was released.
pub struct AStreamThatWouldRunAfterTheSlotIsReleased;

impl<T: ?Sized> WrappedFnReturns<NeitherAFutureNorAStream> for T {}
impl<T: ?Sized + Future> WrappedFnReturns<AFutureThatWouldRunAfterTheSlotIsReleased> for T {}
impl<T: ?Sized + futures_util::Stream> WrappedFnReturns<AStreamThatWouldRunAfterTheSlotIsReleased>
    for T
{
}

/// Compiles only when `T` is neither a future nor a stream (see [`WrappedFnReturns`]).
pub fn a_wrapped_fn_must_not_return_a_future_or_stream<T, Kind>(
    _result: &Result<LeaderRunResult<T>, Error>,
) where
    T: WrappedFnReturns<Kind>,
{
}

/// A store given as `store = <expr>`: a `SharedStore` is used as it is.
pub fn shared_store(store: impl IntoSharedStore) -> Arc<dyn LeaseStore> {
    store.into_shared_store()
}

/// One holder id per process for macro-wrapped functions: `hostname:pid:random`.
fn process_holder_id() -> &'static str {
    static HOLDER: OnceLock<String> = OnceLock::new();
    HOLDER.get_or_init(default_holder_id)
}

/// Runs `body` under a slot of group `name`, as `run_if_leader` does, with the options the
/// call site was written with (checked at compile time) and, when it names none, the
/// process's holder id.
///
/// With `on_store_error = "skip"`, a store failure does not end the wait: the call keeps
/// trying (after a short pause, doubling up to 1 s) until `wait_time` is over, and only then
/// returns `Skipped`; without a wait, the first failure is a `Skipped`. A failure is logged
/// as a warning each time.
pub async fn run<F, Fut, T>(
    store: Option<Arc<dyn LeaseStore>>,
    options: LeaderGroupElectionOptions,
    skip_on_store_error: bool,
    name: &str,
    body: F,
) -> Result<LeaderRunResult<T>, Error>
where
    F: FnOnce(Lease) -> Fut,
    Fut: Future<Output = T>,
{
    let store = store.or_else(default_store).ok_or(Error::NoDefaultStore)?;
    let options = options.holder_id_or_else(process_holder_id);
    let mut elector = LeaderGroupElector::new(store, options)?;
    if skip_on_store_error {
        elector = elector.skip_on_store_error();
    }
    elector.run_if_leader(name, body).await
}
