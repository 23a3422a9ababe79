//! The store's own view: the group's live slots (by the store's clock), sampled every few
//! milliseconds over a direct connection that no fault touches.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader::LeaseStore;
use tokio::task::JoinHandle;

use crate::events::now_micros;

/// One look at the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// When the answer arrived, µs since the epoch.
    pub at: u64,
    /// Live slots then: (holder, fence).
    pub slots: Vec<(String, u64)>,
}

/// Samples a group until dropped.
pub struct Monitor {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: JoinHandle<()>,
}

impl Monitor {
    /// Starts sampling `key` on `store` every `every`.
    pub fn start(store: Arc<dyn LeaseStore>, key: String, every: Duration) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let collected = samples.clone();
        let task = tokio::spawn(async move {
            loop {
                // The faults make the store unreachable at times: no sample then.
                if let Ok(snapshot) = store.state(&key).await {
                    let slots = snapshot
                        .leaders
                        .into_iter()
                        .map(|slot| (slot.holder, slot.fence))
                        .collect();
                    let sample = Sample { at: now_micros(), slots };
                    collected.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
                }
                tokio::time::sleep(every).await;
            }
        });
        Monitor { samples, task }
    }

    /// Stops sampling; every sample taken.
    pub fn finish(self) -> Vec<Sample> {
        self.task.abort();
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}
