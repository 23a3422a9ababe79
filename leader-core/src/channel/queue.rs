//! The bounded queue under a [`LeaderChannel`](super::LeaderChannel): many writers, many
//! readers, drainable from the side.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

pub(crate) struct Queue<T> {
    items: Mutex<VecDeque<T>>,
    capacity: usize,
    /// Signalled when an item is added or the queue closes.
    readable: Notify,
    /// Signalled when an item leaves.
    writable: Notify,
    /// Writers alive; the queue closes when the last one goes.
    writers: AtomicUsize,
}

/// What a push found.
pub(crate) enum Push<T> {
    Pushed,
    /// The queue is full; the item is handed back, with a future that resolves when space
    /// may have been freed (registered before the lock was let go, so no wake-up is lost).
    Full(T),
}

impl<T> Queue<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Queue {
            items: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
            capacity,
            readable: Notify::new(),
            writable: Notify::new(),
            writers: AtomicUsize::new(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<T>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn try_push(&self, item: T) -> Push<T> {
        let mut items = self.lock();
        if items.len() >= self.capacity {
            return Push::Full(item);
        }
        items.push_back(item);
        drop(items);
        self.readable.notify_one();
        Push::Pushed
    }

    /// Waits until space may have been freed. Call it before `try_push`, and keep it: a
    /// `Notified` registered first cannot miss a wake-up in between.
    pub(crate) fn space_freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.writable.notified()
    }

    pub(crate) fn try_pop(&self) -> Option<T> {
        let item = self.lock().pop_front();
        if item.is_some() {
            self.writable.notify_one();
        }
        item
    }

    /// The next item; `None` once every writer is gone and the queue is empty.
    pub(crate) async fn pop(&self) -> Option<T> {
        loop {
            let readable = self.readable.notified();
            tokio::pin!(readable);
            readable.as_mut().enable();
            if let Some(item) = self.try_pop() {
                return Some(item);
            }
            if self.writers.load(Ordering::Acquire) == 0 {
                return self.try_pop();
            }
            readable.await;
        }
    }

    /// Empties the queue; returns how many items it held.
    pub(crate) fn drain(&self) -> usize {
        let drained = std::mem::take(&mut *self.lock()).len();
        self.writable.notify_waiters();
        drained
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn add_writer(&self) {
        self.writers.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn remove_writer(&self) {
        if self.writers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.readable.notify_waiters();
        }
    }
}
