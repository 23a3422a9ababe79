//! Nothing in the process grows with the number of group names ever used: 100,000 distinct
//! names (one group per tenant or per job) leave the heap where it was.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use leader::store::AcquireRequest;
use leader::{LeaseStore, LeaseToken, MemoryStore, RedisStore};
use support::redis_server::RedisServer;

/// Counts the bytes allocated and not yet freed.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NAMES: usize = 100_000;
/// What the heap may keep after 100,000 names: the maps' spare capacity aside, a few pages.
const SLACK: isize = 256 * 1024;

fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Each name: a waiter watches, a holder takes a slot and releases it (when `hold`; a
/// store's round trips are not what this counts), the waiter leaves.
async fn use_names(store: &dyn LeaseStore, prefix: &str, names: usize, hold: bool) {
    for i in 0..names {
        let key = format!("{prefix}-{i}");
        let token = LeaseToken::generate().unwrap();
        let waiter = store.watch_releases(&key).await.unwrap();
        if !hold {
            drop(waiter);
            continue;
        }
        let request = AcquireRequest::new(
            &key,
            std::num::NonZeroU32::MIN,
            token,
            "t",
            Duration::from_secs(10),
        );
        store.acquire(request).await.unwrap();
        store.release(&key, token, Duration::ZERO).await.unwrap();
        drop(waiter);
    }
}

/// The heap after `NAMES` names against the heap after a warm-up on the same store.
async fn growth(store: &dyn LeaseStore, hold: bool) -> isize {
    use_names(store, "warm-up", 2_000, hold).await;
    let before = live_bytes();
    use_names(store, "tenant", NAMES, hold).await;
    live_bytes() - before
}

// One test, on one thread, so nothing else allocates while it counts.
#[test]
fn memory_returns_to_its_start_after_100_000_group_names() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let memory = MemoryStore::new();
        let grown = growth(&memory, true).await;
        let memory_grown = grown;

        let server = RedisServer::start();
        let redis = RedisStore::connect(&server.url()).await.unwrap();
        // Its slots live in Redis (tests/redis_store.rs checks their TTLs); here, the
        // process's side: the release hub's channel per watched group.
        let grown = growth(&redis, false).await;
        let kept = format!("MemoryStore kept {memory_grown} bytes, RedisStore {grown}");
        eprintln!("{kept} after {NAMES} names");
        assert!(memory_grown < SLACK && grown < SLACK, "{kept} after {NAMES} names");
    });
}
