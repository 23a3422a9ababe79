//! `Leadership::events`: client-go's callbacks as a stream (a term begun with its token, its
//! end, each change of the group's holders), under paused time on `MemoryStore` and across
//! processes' own connections on Redis.

mod support;

use std::time::Duration;

use leader::{Leadership, LeadershipEvent, LeadershipEvents, LeadershipOptions, MemoryStore};
use support::redis_server::RedisServer;
use tokio::time::timeout;

const SECOND: Duration = Duration::from_secs(1);

fn options(holder: &str) -> LeadershipOptions {
    LeadershipOptions::new().lease_time(15 * SECOND).holder_id(holder)
}

/// The next event, within 30 s (paused time: at once unless nothing comes).
async fn next(events: &mut LeadershipEvents) -> Option<LeadershipEvent> {
    timeout(30 * SECOND, events.next()).await.expect("an event or the end within 30 s")
}

/// The events until one `until` accepts, the last included.
async fn until(
    events: &mut LeadershipEvents,
    until: impl Fn(&LeadershipEvent) -> bool,
) -> Vec<LeadershipEvent> {
    let mut seen = Vec::new();
    loop {
        let event = next(events).await.expect("the stream goes on");
        let done = until(&event);
        seen.push(event);
        if done {
            return seen;
        }
    }
}

fn holders_of(events: &[LeadershipEvent]) -> Vec<Vec<String>> {
    events
        .iter()
        .filter_map(|event| match event {
            LeadershipEvent::LeadersChanged(holders) => Some(holders.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_term_is_told_begun_with_its_token_then_ended_and_the_stream_ends_at_stop() {
    let store = MemoryStore::new();
    let a = Leadership::start("events", store.clone(), options("a")).await.unwrap();
    let mut events = a.events();
    let seen = until(&mut events, |event| matches!(event, LeadershipEvent::Elected { .. })).await;
    let Some(LeadershipEvent::Elected { term, fence, token }) = seen.last().cloned() else {
        unreachable!()
    };
    assert_eq!((term, Some(fence)), (1, a.fence()));
    assert!(!token.is_cancelled());
    let b = Leadership::start("events", store.clone(), options("b")).await.unwrap();
    a.resign().await;
    assert!(token.is_cancelled());
    let seen = until(
        &mut events,
        |event| matches!(event, LeadershipEvent::LeadersChanged(holders) if holders == &["b"]),
    )
    .await;
    assert!(
        seen.iter().any(|event| matches!(event, LeadershipEvent::Lost { term: 1 })),
        "{seen:?}"
    );
    b.stop().await.expect("stopped");
    let seen = until(&mut events, |event| matches!(event, LeadershipEvent::Elected { .. })).await;
    assert!(matches!(seen.last(), Some(LeadershipEvent::Elected { term: 2, .. })), "{seen:?}");
    a.stop().await.expect("stopped");
    let mut rest = Vec::new();
    while let Some(event) = next(&mut events).await {
        rest.push(event);
    }
    assert!(matches!(rest.first(), Some(LeadershipEvent::Lost { term: 2 })), "{rest:?}");
}

#[tokio::test(start_paused = true)]
async fn every_elected_is_followed_by_its_lost_and_holders_are_told_once_per_change() {
    let store = MemoryStore::new();
    let a = Leadership::start("events", store.clone(), options("a")).await.unwrap();
    let b = Leadership::start("events", store.clone(), options("b")).await.unwrap();
    let mut events = a.events();
    let reading = tokio::spawn(async move {
        let mut told = Vec::new();
        while let Some(event) = next(&mut events).await {
            told.push(event);
        }
        told
    });
    for _ in 0..4 {
        tokio::time::sleep(SECOND).await;
        let leader = if a.is_leader() { &a } else { &b };
        leader.resign().await;
    }
    tokio::time::sleep(SECOND).await;
    a.stop().await.expect("stopped");
    let told = reading.await.unwrap();
    let mut open = None;
    for event in &told {
        match event {
            LeadershipEvent::Elected { term, .. } => {
                assert_eq!(open, None, "{told:?}");
                open = Some(*term);
            }
            LeadershipEvent::Lost { term } => assert_eq!(open.take(), Some(*term), "{told:?}"),
            _ => {}
        }
    }
    assert_eq!(open, None, "the last term was told ended: {told:?}");
    let holders = holders_of(&told);
    assert!(holders.windows(2).all(|pair| pair[0] != pair[1]), "no repeats: {holders:?}");
    assert!(holders.len() >= 4, "every hand-over told: {holders:?}");
    b.stop().await.expect("stopped");
}

/// The holders come from the store, so a leader elected in another process (here: another
/// store with its own connections) is told, and a stopped or dropped leadership ends the
/// stream.
#[tokio::test]
async fn a_leader_elected_elsewhere_is_told_on_redis() {
    let server = RedisServer::start();
    let here = leader::store::connect(&server.url()).await.unwrap();
    let there = leader::store::connect(&server.url()).await.unwrap();
    let elsewhere = Leadership::start("events", there, options("10.0.0.9:8080")).await.unwrap();
    timeout(5 * SECOND, elsewhere.wait_for_leadership()).await.unwrap().unwrap();
    let standby = Leadership::start("events", here, options("10.0.0.7:8080")).await.unwrap();
    let mut events = standby.events();
    let seen =
        until(&mut events, |event| matches!(event, LeadershipEvent::LeadersChanged(_))).await;
    assert_eq!(holders_of(&seen), [["10.0.0.9:8080"]]);
    elsewhere.stop().await.expect("stopped");
    let seen = until(&mut events, |event| matches!(event, LeadershipEvent::Elected { .. })).await;
    assert!(!holders_of(&seen).contains(&vec!["10.0.0.9:8080".to_owned()]), "{seen:?}");
    drop(standby);
    let rest = timeout(5 * SECOND, async {
        let mut rest = Vec::new();
        while let Some(event) = events.next().await {
            rest.push(event);
        }
        rest
    })
    .await
    .expect("a dropped leadership ends its stream");
    assert!(
        rest.iter().any(|event| matches!(event, LeadershipEvent::Lost { term: 1 })),
        "{rest:?}"
    );
}

/// A holder that takes its slot again (a new fence under the same holder id, as a process
/// restarted with a fixed id does) is no new leader: `LeadersChanged` is told only when the
/// set of holder ids changes.
#[tokio::test(start_paused = true)]
async fn a_holder_that_takes_its_slot_again_is_no_new_leader() {
    let store = MemoryStore::new();
    let two = |holder| options(holder).max_leaders(2);
    let w = Leadership::start("events", store.clone(), two("w")).await.unwrap();
    let a = Leadership::start("events", store.clone(), two("a")).await.unwrap();
    let mut events = w.events();
    until(
        &mut events,
        |event| matches!(event, LeadershipEvent::LeadersChanged(holders) if holders.len() == 2),
    )
    .await;
    let fence = a.fence().expect("a leads");
    a.resign().await; // nobody else waits: a takes its slot again, under a new fence
    tokio::time::sleep(SECOND).await;
    assert!(a.fence().is_some_and(|again| again > fence), "a took its slot again");
    let told = timeout(5 * SECOND, events.next()).await;
    assert!(told.is_err(), "nothing changed, yet told: {told:?}");
    w.stop().await.expect("stopped");
    a.stop().await.expect("stopped");
}
