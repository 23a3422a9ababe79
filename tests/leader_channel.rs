//! `LeaderChannel`: a leader's items reach the reader, a follower's are dropped, and every
//! drop is counted by reason.

mod support;

use std::time::Duration;

use leader::{
    Delivery, DropCounts, DropReason, FullMode, LeaderChannel, LeaderChannelOptions, Leadership,
    LeadershipOptions, MemoryStore,
};
use support::capture_logs;
use tokio::time::{sleep, timeout};

const SECOND: Duration = Duration::from_secs(1);

async fn leader_and_follower(store: &MemoryStore) -> (Leadership, Leadership) {
    let leader =
        Leadership::start("inventory", store.clone(), LeadershipOptions::new()).await.unwrap();
    leader.wait_for_leadership().await.expect("no refusal");
    let follower =
        Leadership::start("inventory", store.clone(), LeadershipOptions::new()).await.unwrap();
    sleep(SECOND).await;
    assert!(leader.is_leader() && !follower.is_leader());
    (leader, follower)
}

#[tokio::test(start_paused = true)]
async fn the_leaders_items_reach_the_reader_and_a_followers_are_dropped() {
    let store = MemoryStore::new();
    let (leader, follower) = leader_and_follower(&store).await;
    let on_leader = LeaderChannel::new("changes", &leader, LeaderChannelOptions::new()).unwrap();
    let on_follower =
        LeaderChannel::new("changes", &follower, LeaderChannelOptions::new()).unwrap();
    for item in 1..=3 {
        assert_eq!(on_leader.writer().send(item).await, Delivery::Queued);
        assert_eq!(
            on_follower.writer().send(item * 10).await,
            Delivery::Dropped(DropReason::Follower)
        );
    }
    let reader = on_leader.reader();
    let received = [reader.recv().await, reader.recv().await, reader.recv().await];
    assert_eq!(received, [Some(1), Some(2), Some(3)]);
    assert_eq!(on_follower.reader().try_recv(), None);
    assert_eq!(on_follower.drops(), DropCounts { follower: 3, full: 0, loss: 0 });
    assert_eq!(on_leader.drops(), DropCounts::default());
}

#[tokio::test(start_paused = true)]
async fn a_full_buffer_drops_the_newest_when_asked() {
    let store = MemoryStore::new();
    let (leader, _follower) = leader_and_follower(&store).await;
    let options = LeaderChannelOptions::new().capacity(2).full_mode(FullMode::DropNewest);
    let channel = LeaderChannel::new("bounded", &leader, options).unwrap();
    let writer = channel.writer();
    assert_eq!(writer.send(1).await, Delivery::Queued);
    assert_eq!(writer.try_send(2), Delivery::Queued);
    assert_eq!(writer.send(3).await, Delivery::Dropped(DropReason::Full));
    assert_eq!(writer.try_send(4), Delivery::Dropped(DropReason::Full));
    assert_eq!(channel.drops(), DropCounts { follower: 0, full: 2, loss: 0 });
    assert_eq!(channel.reader().try_recv(), Some(1));
    assert_eq!(writer.try_send(5), Delivery::Queued, "room again after a read");
}

#[tokio::test(start_paused = true)]
async fn a_writer_waiting_for_space_is_woken_when_leadership_ends() {
    let store = MemoryStore::new();
    let (leader, follower) = leader_and_follower(&store).await;
    let channel =
        LeaderChannel::new("waiting", &leader, LeaderChannelOptions::new().capacity(1)).unwrap();
    assert_eq!(channel.writer().send(1).await, Delivery::Queued);
    let writer = channel.writer();
    let waiting = tokio::spawn(async move { writer.send(2).await });
    sleep(SECOND).await;
    assert!(!waiting.is_finished(), "waits for space while leading");
    leader.resign().await;
    let delivery = timeout(SECOND, waiting).await.expect("woken by the loss").unwrap();
    assert_eq!(delivery, Delivery::Dropped(DropReason::Follower));
    // Without drain_on_loss the buffered item stays readable.
    assert_eq!(channel.reader().try_recv(), Some(1));
    follower.wait_for_leadership().await.expect("no refusal");
}

#[tokio::test(start_paused = true)]
async fn drain_on_loss_discards_the_buffer_and_counts_it() {
    let store = MemoryStore::new();
    let (leader, _follower) = leader_and_follower(&store).await;
    let channel =
        LeaderChannel::new("drained", &leader, LeaderChannelOptions::new().drain_on_loss(true))
            .unwrap();
    for item in 0..5 {
        assert_eq!(channel.writer().send(item).await, Delivery::Queued);
    }
    leader.resign().await;
    support::eventually(SECOND, "the buffer is drained", || async { channel.is_empty() }).await;
    assert_eq!(channel.drops(), DropCounts { follower: 0, full: 0, loss: 5 });
}

#[tokio::test(start_paused = true)]
async fn drops_are_summarised_at_most_once_per_interval() {
    let (_guard, logs) = capture_logs();
    let store = MemoryStore::new();
    let (_leader, follower) = leader_and_follower(&store).await;
    let options = LeaderChannelOptions::new().drop_report_interval(30 * SECOND);
    let channel = LeaderChannel::new("noisy", &follower, options).unwrap();
    for item in 0..100 {
        channel.writer().send(item).await;
        sleep(Duration::from_millis(100)).await; // 10 s of drops
    }
    assert_eq!(
        logs.lines_with("leader channel dropped items").len(),
        1,
        "the first drop is reported"
    );
    sleep(30 * SECOND).await;
    channel.writer().send(100).await;
    let reports = logs.lines_with("leader channel dropped items");
    assert_eq!(reports.len(), 2);
    assert!(reports[1].contains("follower=100"), "{}", reports[1]);
    assert_eq!(channel.drops().follower, 101);
}

#[tokio::test(start_paused = true)]
async fn the_reader_sees_the_end_when_every_writer_is_gone() {
    let store = MemoryStore::new();
    let (leader, _follower) = leader_and_follower(&store).await;
    let channel = LeaderChannel::new("ending", &leader, LeaderChannelOptions::new()).unwrap();
    let (writer, reader) = (channel.writer(), channel.reader());
    writer.send("last").await;
    drop((channel, writer));
    assert_eq!(reader.recv().await, Some("last"));
    assert_eq!(timeout(SECOND, reader.recv()).await.expect("not left waiting"), None);
}

#[test]
fn bad_options_are_refused() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let leadership =
            Leadership::start("x", MemoryStore::new(), LeadershipOptions::new()).await.unwrap();
        let err =
            LeaderChannel::<u8>::new("c", &leadership, LeaderChannelOptions::new().capacity(0))
                .err()
                .unwrap();
        assert_eq!(err.to_string(), "invalid `capacity` 0: must be at least 1");
        let options = LeaderChannelOptions::new().drop_report_interval(Duration::ZERO);
        assert!(LeaderChannel::<u8>::new("c", &leadership, options).is_err());
    });
}
