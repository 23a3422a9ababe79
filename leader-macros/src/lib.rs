//! Attribute macros of the [`leader`](https://docs.rs/leader) crate, which re-exports them:
//! `#[leader_election]` and `#[leader_group_election]` make an async fn run only on the
//! candidates that win a slot.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod args;
mod duration;
mod errors;
mod expand;
mod krate;
mod name;

use proc_macro::TokenStream;

use args::Flavor;

/// Runs the async fn only on the one candidate that holds the leadership of `name`.
///
/// The fn keeps its signature, attributes and docs; only its return type `T` becomes
/// `Result<LeaderRunResult<T>, leader::Error>`: `Ok(Elected(value))` when this candidate won
/// and the body ran, `Ok(Skipped)` when another candidate holds the slot, `Err` when the name
/// is invalid or the store failed. Inside the body, `Lease::current()` gives the lease.
///
/// # Arguments
///
/// | argument | default | meaning |
/// |---|---|---|
/// | `name = "…"` | required | the group's name; may interpolate the fn's arguments: `"report-{tenant}"` |
/// | `wait_time = "…"` | `"0s"`: one attempt | how long to wait for the slot |
/// | `lease_time = "…"` | `"30s"` | the slot's time to live; more than zero |
/// | `min_lease_time = "…"` | `"0s"` | keep the slot this long after the grant even if the body ends sooner; at most `lease_time` |
/// | `auto_extend` | off | renew every `lease_time / 3` while the body runs (`auto_extend = false` to spell out the default) |
/// | `holder_id = "…"` | `hostname:pid:random`, one per process | this candidate's id in state and logs |
/// | `store = <expr>` | the process-wide default | an owned store, evaluated in the fn's scope, such as `store = self.store.clone()` |
/// | `on_store_error = "…"` | `"error"` | `"skip"` turns store failures into `Skipped` (logged as warnings), after trying again until `wait_time` is over |
/// | `crate = "…"` | found in Cargo.toml | the path of the runtime crate, if the macro cannot find it |
///
/// Durations are string literals: `"500ms"`, `"10s"`, `"1m30s"`, `"2h"`, or ISO-8601
/// `"PT0.5S"`, `"PT10M"`. Every argument is checked at compile time, by the runtime's own
/// validation.
///
/// The declared return type is the body's expected type, so the body coerces as it would
/// without the macro. A fn that returns a future or a stream is refused (the slot would be
/// released before it runs): by its written form, and behind another name by its type.
///
/// Without `store`, the process-wide default is used: install it once at start-up with
/// `leader::install_default_store(store)`. With neither, the call returns
/// `Err(Error::NoDefaultStore)`.
///
/// # Example
///
/// ```
/// use leader::{leader_election, LeaderRunResult, MemoryStore};
///
/// #[leader_election(name = "nightly-report", lease_time = "10m", min_lease_time = "30s", auto_extend)]
/// async fn nightly_report(day: u32) -> String {
///     format!("report for day {day}")
/// }
///
/// # #[tokio::main] async fn main() -> Result<(), leader::Error> {
/// leader::install_default_store(MemoryStore::new());
/// assert_eq!(nightly_report(7).await?, LeaderRunResult::Elected("report for day 7".to_owned()));
/// // The minimum lease keeps the slot: a second run within 30 s is skipped.
/// assert_eq!(nightly_report(7).await?, LeaderRunResult::Skipped);
/// # Ok(()) }
/// ```
///
/// # Without the macro
///
/// The example above is this code, written by hand:
///
/// ```
/// use std::time::Duration;
/// use leader::{LeaderElectionOptions, LeaderElector, LeaderRunResult};
///
/// async fn nightly_report(day: u32) -> Result<LeaderRunResult<String>, leader::Error> {
///     let store = leader::default_store().ok_or(leader::Error::NoDefaultStore)?;
///     let options = LeaderElectionOptions::new()
///         .lease_time(Duration::from_secs(600))
///         .min_lease_time(Duration::from_secs(30))
///         .auto_extend(true);
///     let elector = LeaderElector::new(store, options)?;
///     elector.run_if_leader("nightly-report", |_lease| async move {
///         format!("report for day {day}")
///     }).await
/// }
/// # #[tokio::main] async fn main() -> Result<(), leader::Error> {
/// # leader::install_default_store(leader::MemoryStore::new());
/// # assert!(nightly_report(7).await?.is_elected());
/// # Ok(()) }
/// ```
#[proc_macro_attribute]
pub fn leader_election(attribute: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Flavor::Single, attribute.into(), item.into()).into()
}

/// Runs the async fn only on the at most `max_leaders` candidates that hold a slot of the
/// group `name`.
///
/// Everything works as in [`macro@leader_election`], plus the required `max_leaders = N`
/// (at least 2; for one leader use `#[leader_election]`). The return type `T` becomes
/// `Result<LeaderRunResult<T>, leader::Error>`; `Skipped` means every slot was held by
/// others for the whole `wait_time`.
///
/// # Arguments
///
/// | argument | default | meaning |
/// |---|---|---|
/// | `name = "…"` | required | the group's name; may interpolate the fn's arguments: `"pool-{region}"` |
/// | `max_leaders = N` | required | how many slots the group has, at least 2 |
/// | `wait_time = "…"` | `"0s"`: one attempt | how long to wait for a free slot |
/// | `lease_time = "…"` | `"30s"` | each slot's time to live; more than zero |
/// | `min_lease_time = "…"` | `"0s"` | keep the slot this long after the grant even if the body ends sooner; at most `lease_time` |
/// | `auto_extend` | off | renew every `lease_time / 3` while the body runs |
/// | `holder_id = "…"` | `hostname:pid:random`, one per process | this candidate's id in state and logs |
/// | `store = <expr>` | the process-wide default | an owned store, evaluated in the fn's scope |
/// | `on_store_error = "…"` | `"error"` | `"skip"` turns store failures into `Skipped`, after trying again until `wait_time` is over |
/// | `crate = "…"` | found in Cargo.toml | the path of the runtime crate |
///
/// # Example
///
/// ```
/// use leader::{leader_group_election, LeaderRunResult, MemoryStore};
///
/// struct Thumbnails {
///     store: MemoryStore,
/// }
///
/// impl Thumbnails {
///     #[leader_group_election(name = "thumbnail-workers", max_leaders = 3,
///                             wait_time = "500ms", lease_time = "10s", store = self.store.clone())]
///     async fn process_batch(&self) -> Option<usize> {
///         Some(42) // claim and process a batch
///     }
/// }
///
/// # #[tokio::main] async fn main() -> Result<(), leader::Error> {
/// let service = Thumbnails { store: MemoryStore::new() };
/// match service.process_batch().await? {
///     LeaderRunResult::Elected(summary) => assert_eq!(summary, Some(42)),
///     LeaderRunResult::Skipped => unreachable!("three slots are free"),
/// }
/// # Ok(()) }
/// ```
///
/// # Without the macro
///
/// ```
/// use std::time::Duration;
/// use leader::{LeaderGroupElectionOptions, LeaderGroupElector, LeaderRunResult, MemoryStore};
///
/// struct Thumbnails {
///     store: MemoryStore,
/// }
///
/// impl Thumbnails {
///     async fn process_batch(&self) -> Result<LeaderRunResult<Option<usize>>, leader::Error> {
///         let options = LeaderGroupElectionOptions::new(3)
///             .wait_time(Duration::from_millis(500))
///             .lease_time(Duration::from_secs(10));
///         let group = LeaderGroupElector::new(self.store.clone(), options)?;
///         group.run_if_leader("thumbnail-workers", |_lease| async move { Some(42) }).await
///     }
/// }
/// # #[tokio::main] async fn main() -> Result<(), leader::Error> {
/// # let service = Thumbnails { store: MemoryStore::new() };
/// # assert!(service.process_batch().await?.is_elected());
/// # Ok(()) }
/// ```
#[proc_macro_attribute]
pub fn leader_group_election(attribute: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Flavor::Group, attribute.into(), item.into()).into()
}
