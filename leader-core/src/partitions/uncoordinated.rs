//! A node over a store that does not coordinate (a [`DisabledStore`](crate::DisabledStore)):
//! it follows `when_uncoordinated`, as a `Leadership` does. `Follow` owns no partition and
//! says so; `Lead` owns every partition, under fence 0 and a lease that never runs out,
//! until stopped, and then hands each over as a coordinated node does (its work is told to
//! stop, and the node waits for its handles, at most the hand-over grace).

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::PartitionsView;
use super::events::EventSender;
use super::node::Shared;
use super::options::Settings;
use super::partition::Cell;
use crate::duration::MAX_DURATION;
use crate::election::{Lease, LossReason};
use crate::error::Error;
use crate::leadership::WhenUncoordinated;
use crate::store::Grant;
use crate::token::LeaseToken;

/// Runs an uncoordinated node over a store of kind `store` until `stop` is cancelled.
pub(super) async fn run(
    settings: Arc<Settings>,
    store: &'static str,
    shared: Arc<Shared>,
    events: EventSender,
    view: watch::Sender<PartitionsView>,
    stop: CancellationToken,
) -> Result<(), Error> {
    let leads = settings.when_uncoordinated == WhenUncoordinated::Lead;
    tracing::warn!(
        set = %settings.name,
        store,
        behaviour = ?settings.when_uncoordinated,
        "the store does not coordinate: {}",
        if leads {
            "owning every partition without coordination"
        } else {
            "following; this node will own no partition"
        }
    );
    if leads {
        own_every_partition(&settings, &shared, &events);
        let all: Vec<u32> = (0..settings.count).collect();
        view.send_replace(PartitionsView { members: 1, share: all.clone(), owned: all });
    }
    stop.cancelled().await;
    let owned = std::mem::take(&mut *shared.owned.lock().unwrap_or_else(|p| p.into_inner()));
    view.send_replace(PartitionsView::default());
    for cell in owned.values() {
        cell.revoke(LossReason::SteppedDown);
    }
    let handed_over = owned.values().map(|cell| cell.handles_dropped());
    let _ =
        tokio::time::timeout(settings.handover_grace, futures_util::future::join_all(handed_over))
            .await;
    Ok(())
}

/// Makes every partition this node's, each told as an `Assigned` event.
fn own_every_partition(settings: &Settings, shared: &Shared, events: &EventSender) {
    let now = SystemTime::now();
    let grant = Grant {
        fence: 0,
        acquired_at: now,
        expires_at: now + MAX_DURATION,
        expires_in: MAX_DURATION,
    };
    let mut owned = shared.owned.lock().unwrap_or_else(|p| p.into_inner());
    for index in 0..settings.count {
        let key: Arc<str> = settings.partition_keys[index as usize].as_str().into();
        let name: Arc<str> = format!("{}/{index}", settings.name).into();
        let holder = Arc::clone(&settings.holder_id);
        let cell = Cell::new(index, events.clone(), |on_loss| {
            let token = LeaseToken::from_u128(0);
            Lease::new(name, key, token, holder, grant, Instant::now(), Some(on_loss))
        });
        events.assigned(cell.handle());
        owned.insert(index, cell);
    }
}
