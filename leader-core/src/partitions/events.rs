//! The queue of a node's [`PartitionEvent`]s, from the node (and each partition's loss
//! signal) to whoever reads them.
//!
//! A grant revoked before its `Assigned` event was read is told by neither event: the
//! unread `Assigned` is taken out of the queue, and with it its handle of the partition,
//! which would otherwise hold the hand-over back until its grace ended. So what waits to
//! be read is at most one `Assigned` per partition owned, and one `Revoked` per grant read
//! and not yet told revoked, however often the set changes and whether or not anyone reads.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::partition::{Cell, Partition, PartitionEvent};
use crate::election::LossReason;

/// How many events taken out of the queue it keeps as gaps before closing them up.
const GAPS_KEPT: usize = 64;

/// A new queue: its sending side, for the node, and its reading side.
pub(crate) fn queue() -> (EventSender, EventReceiver) {
    let queue = Arc::new(Queue { state: Mutex::new(State::new(1)), ready: Notify::new() });
    (EventSender { queue: Arc::clone(&queue) }, EventReceiver { queue })
}

struct Queue {
    state: Mutex<State>,
    /// Notified at each event, and when the last sender is gone (one reader).
    ready: Notify,
}

struct State {
    /// The events not yet read, in order; `None` where one was taken out.
    events: VecDeque<Option<PartitionEvent>>,
    /// The sequence number of `events[0]`.
    first: u64,
    /// The sequence number of each partition's unread `Assigned` event.
    unread_grants: HashMap<u32, u64>,
    /// How many of `events` are `None`.
    gaps: usize,
    /// The senders alive: none left and nothing queued is the end of the events.
    senders: usize,
    /// Whether the reading side is still there (without it, nothing is queued).
    read: bool,
}

impl State {
    fn new(senders: usize) -> Self {
        State {
            events: VecDeque::new(),
            first: 0,
            unread_grants: HashMap::new(),
            gaps: 0,
            senders,
            read: true,
        }
    }

    fn push(&mut self, event: PartitionEvent) {
        if let PartitionEvent::Assigned(partition) = &event {
            let sequence = self.first + self.events.len() as u64;
            self.unread_grants.insert(partition.index(), sequence);
        }
        self.events.push_back(Some(event));
    }

    /// Takes the unread `Assigned` event of `cell`'s grant out of the queue, if there is one.
    fn take_unread_grant(&mut self, cell: &Cell) -> Option<PartitionEvent> {
        let sequence = *self.unread_grants.get(&cell.index)?;
        let at = usize::try_from(sequence - self.first).ok()?;
        let queued = self.events.get_mut(at)?;
        if !matches!(queued, Some(PartitionEvent::Assigned(partition)) if partition.is_of(cell)) {
            return None;
        }
        self.unread_grants.remove(&cell.index);
        self.gaps += 1;
        let taken = queued.take();
        if self.gaps > GAPS_KEPT && self.gaps * 2 > self.events.len() {
            self.close_gaps();
        }
        taken
    }

    /// Closes the gaps left by events taken out (at most every other event is one).
    fn close_gaps(&mut self) {
        self.events.retain(Option::is_some);
        self.gaps = 0;
        self.unread_grants.clear();
        for (at, event) in self.events.iter().enumerate() {
            if let Some(PartitionEvent::Assigned(partition)) = event {
                self.unread_grants.insert(partition.index(), self.first + at as u64);
            }
        }
    }

    /// The next event, gaps skipped.
    fn pop(&mut self) -> Option<PartitionEvent> {
        while let Some(next) = self.events.pop_front() {
            let sequence = self.first;
            self.first += 1;
            let Some(event) = next else {
                self.gaps -= 1;
                continue;
            };
            if let PartitionEvent::Assigned(partition) = &event
                && self.unread_grants.get(&partition.index()) == Some(&sequence)
            {
                self.unread_grants.remove(&partition.index());
            }
            return Some(event);
        }
        None
    }
}

impl Queue {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The node's side of the queue (cheap to clone: each partition's cell keeps one).
pub(crate) struct EventSender {
    queue: Arc<Queue>,
}

impl EventSender {
    /// Tells of the grant of `partition`.
    pub(crate) fn assigned(&self, partition: Partition) {
        let mut state = self.queue.state();
        if !state.read {
            drop(state);
            return; // `partition` dropped outside the lock
        }
        state.push(PartitionEvent::Assigned(partition));
        drop(state);
        self.queue.ready.notify_one();
    }

    /// Tells that `cell`'s grant was revoked for `reason`; nothing at all if its `Assigned`
    /// event was not read yet (that event is taken out, and its handle dropped).
    pub(crate) fn revoked(&self, cell: &Cell, reason: LossReason) {
        let mut state = self.queue.state();
        if !state.read {
            return;
        }
        if let Some(unread) = state.take_unread_grant(cell) {
            drop(state);
            drop(unread);
            return;
        }
        state.push(PartitionEvent::Revoked { index: cell.index, reason });
        drop(state);
        self.queue.ready.notify_one();
    }
}

impl Clone for EventSender {
    fn clone(&self) -> Self {
        self.queue.state().senders += 1;
        EventSender { queue: Arc::clone(&self.queue) }
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        let mut state = self.queue.state();
        state.senders -= 1;
        let last = state.senders == 0;
        drop(state);
        if last {
            self.queue.ready.notify_one();
        }
    }
}

/// The reading side of the queue.
pub(crate) struct EventReceiver {
    queue: Arc<Queue>,
}

impl EventReceiver {
    /// A reading side whose events have ended.
    pub(crate) fn ended() -> Self {
        let queue = Arc::new(Queue { state: Mutex::new(State::new(0)), ready: Notify::new() });
        EventReceiver { queue }
    }

    /// The next event; `None` once every sender is gone and every event was read.
    pub(crate) async fn next(&mut self) -> Option<PartitionEvent> {
        loop {
            {
                let mut state = self.queue.state();
                if let Some(event) = state.pop() {
                    return Some(event);
                }
                if state.senders == 0 {
                    return None;
                }
            }
            // One reader: a notification sent since the check above is kept for it.
            self.queue.ready.notified().await;
        }
    }

    /// How many events wait to be read.
    pub(crate) fn len(&self) -> usize {
        let state = self.queue.state();
        state.events.len() - state.gaps
    }
}

impl Drop for EventReceiver {
    /// Nobody reads any more: what waits is dropped (with its handles), nothing more is
    /// queued.
    fn drop(&mut self) {
        let mut state = self.queue.state();
        state.read = false;
        state.unread_grants.clear();
        state.gaps = 0;
        let waiting = std::mem::take(&mut state.events);
        drop(state);
        drop(waiting);
    }
}

impl std::fmt::Debug for EventReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReceiver").field("waiting", &self.len()).finish()
    }
}
