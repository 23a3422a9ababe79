//! The process-wide default store, which the attribute macros use unless given `store = …`.

use std::sync::{Arc, RwLock};

use crate::store::{IntoSharedStore, LeaseStore};

static DEFAULT_STORE: RwLock<Option<Arc<dyn LeaseStore>>> = RwLock::new(None);

/// Installs `store` as the process-wide default, replacing any earlier one; returns the
/// store it replaced.
///
/// Call it once at start-up, before the first macro-wrapped function runs.
///
/// ```
/// use leader_core::{MemoryStore, default_store, install_default_store};
///
/// install_default_store(MemoryStore::new());
/// assert_eq!(default_store().map(|store| store.kind()), Some("memory"));
/// ```
pub fn install_default_store(store: impl IntoSharedStore) -> Option<Arc<dyn LeaseStore>> {
    let mut slot = DEFAULT_STORE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    slot.replace(store.into_shared_store())
}

/// The process-wide default store, if one was installed.
pub fn default_store() -> Option<Arc<dyn LeaseStore>> {
    DEFAULT_STORE.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
}
