//! How every way in takes its store: [`SharedStore`], and [`IntoSharedStore`] for anything
//! that becomes one.

use std::any::Any;
use std::sync::Arc;

use super::LeaseStore;

/// A store that electors, leaderships, partition nodes, observers and tools share: what
/// [`connect`](super::connect) returns.
///
/// Everything made from one `SharedStore` (or clones of it) uses that one store: its
/// connections, its subscription, and one reader per observed group however many observers
/// there are.
pub type SharedStore = Arc<dyn LeaseStore>;

/// What every way in takes as its store: any [`LeaseStore`] by value (moved into a
/// [`SharedStore`] of its own), or a `SharedStore`, by value or by reference, used as it is.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// use std::sync::Arc;
/// use leader_core::store::{IntoSharedStore, SharedStore};
/// use leader_core::MemoryStore;
///
/// let shared: SharedStore = Arc::new(MemoryStore::new());
/// assert!(Arc::ptr_eq(&shared.clone().into_shared_store(), &shared), "used as it is");
/// assert!(Arc::ptr_eq(&(&shared).into_shared_store(), &shared));
/// let own = MemoryStore::new().into_shared_store();
/// assert_eq!(own.kind(), "memory");
/// # Ok(()) }
/// ```
pub trait IntoSharedStore {
    /// This store as a [`SharedStore`].
    fn into_shared_store(self) -> SharedStore;
}

impl<S: LeaseStore + 'static> IntoSharedStore for S {
    fn into_shared_store(self) -> SharedStore {
        // A `SharedStore` is itself a `LeaseStore` (through `Arc`): hand it on as it is
        // rather than wrap it in another `Arc`, which would make it a store of its own to
        // everything keyed by the handle (the observers' readers).
        let mut store = Some(self);
        let as_any: &mut dyn Any = &mut store;
        if let Some(shared) = as_any.downcast_mut::<Option<SharedStore>>().and_then(Option::take) {
            return shared;
        }
        match store {
            Some(store) => Arc::new(store),
            None => unreachable!("only a SharedStore is taken out, and it was returned"),
        }
    }
}

impl IntoSharedStore for &SharedStore {
    fn into_shared_store(self) -> SharedStore {
        Arc::clone(self)
    }
}
