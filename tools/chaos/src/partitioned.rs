//! A candidate in partitions mode: a node of a set of [`PARTITIONS`] partitions
//! ([`Partitions`]), each partition it owns a term of its own. While it owns a partition it
//! checks `live_fence()` every tick and writes to the register's key `{key}/{partition}`
//! with that fence; it reports each grant, check, write, hand-over and loss tagged with the
//! partition (see [`report_partition`]), so the lab judges every partition as a group of one
//! slot. Commands on standard input: `stall` (SIGSTOP between its next check and its write),
//! `disarm`, and `stop` (hand every partition over and exit).

use std::collections::BTreeMap;
use std::time::Duration;

use leader::store::SharedStore;
use leader::{KeyOptions, LossReason, Partition, PartitionEvent, PartitionOptions, Partitions};
use tokio::sync::mpsc;
use tokio::time::sleep;

use crate::candidate::{CandidateArgs, Register, TICK, read_commands, report, report_partition};
use crate::events::{Event, micros, now_micros};

/// Partitions in a chaos set: more than candidates, so nodes own one or two.
pub const PARTITIONS: u32 = 6;

/// The store key of the set's members and of each partition: `{key}/members`, `{key}/{i}`.
pub fn partition_keys() -> KeyOptions {
    KeyOptions::new().format("{role}")
}

/// Runs the node until told to stop or its input closes.
pub async fn run(args: CandidateArgs, store: SharedStore) -> Result<(), String> {
    let lease = Duration::from_millis(args.lease_ms);
    let options = PartitionOptions::new()
        .lease_time(lease)
        .renew_interval(lease / 3)
        .retry_interval(lease / 5)
        .holder_id(args.id.clone())
        .keys(partition_keys());
    // Every release the node sends is reported, as the other modes' candidates do.
    let store = crate::stalling::reporting_releases(store, &args.key);
    let mut node = Partitions::start(&args.key, PARTITIONS, store, options)
        .await
        .map_err(|e| e.to_string())?;
    let events = forward(node.take_events());
    let result = work(&args, events).await;
    node_stop(node).await;
    result
}

/// The node's events on a channel this loop can poll.
fn forward(mut events: leader::PartitionEvents) -> mpsc::UnboundedReceiver<PartitionEvent> {
    let (send, receive) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if send.send(event).is_err() {
                return;
            }
        }
    });
    receive
}

/// The candidate's checks and writes on each partition it owns; the node renews and
/// rebalances in the background.
async fn work(
    args: &CandidateArgs,
    mut events: mpsc::UnboundedReceiver<PartitionEvent>,
) -> Result<(), String> {
    let mut register = Register::new(args.register.clone());
    let mut commands = read_commands();
    let mut stall_next = false;
    let mut owned: BTreeMap<u32, Partition> = BTreeMap::new();
    loop {
        while let Ok(command) = commands.try_recv() {
            match command.as_str() {
                "stall" => stall_next = true,
                "disarm" => stall_next = false,
                _ => return Ok(()),
            }
        }
        if commands.is_closed() && commands.is_empty() {
            return Ok(());
        }
        while let Ok(event) = events.try_recv() {
            match event {
                PartitionEvent::Assigned(partition) => {
                    let (at, remaining) = (now_micros(), partition.lease().remaining());
                    let began = Event::TermBegan {
                        at,
                        fence: partition.fence(),
                        believes_until: at + remaining.as_micros() as u64,
                    };
                    report_partition(partition.index(), &began);
                    owned.insert(partition.index(), partition);
                }
                PartitionEvent::Revoked { index, reason } => {
                    let Some(partition) = owned.remove(&index) else { continue };
                    let fence = partition.fence();
                    if reason == LossReason::SteppedDown {
                        // Handed over: released once this handle is dropped (below).
                        report_partition(index, &Event::Resigning { at: now_micros(), fence });
                    }
                    let ended =
                        Event::Ended { at: now_micros(), fence, reason: reason.to_string() };
                    report_partition(index, &ended);
                }
                _ => {}
            }
        }
        // A stall needs a partition to write to: decline without one.
        if stall_next && owned.is_empty() {
            stall_next = false;
            report(&Event::StallDeclined { at: now_micros() });
        }
        for (&index, partition) in &owned {
            // The check, right before acting, as in Leadership mode: the time left first.
            let lease = partition.lease();
            let (at, remaining) = (now_micros(), lease.remaining());
            let Some(fence) = partition.live_fence() else { continue };
            let leading = Event::Leading {
                at,
                fence,
                acquired_at: micros(lease.acquired_at()),
                expires_at: micros(lease.expires_at()),
                believes_until: at + remaining.as_micros() as u64,
            };
            report_partition(index, &leading);
            if std::mem::take(&mut stall_next) {
                use std::io::Write as _;
                let _ = std::io::stdout().flush();
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
            }
            let at = now_micros();
            let key = format!("{}/{index}", args.key);
            let accepted = register.write(&key, &args.id, fence).await;
            report_partition(index, &Event::Wrote { at, fence, accepted });
        }
        sleep(TICK).await;
    }
}

async fn node_stop(node: Partitions) {
    // The handles are dropped (the work loop returned), so the hand-overs complete at once.
    if let Err(error) = node.stop().await {
        eprintln!("candidate: stopping the node: {error}");
    }
    report(&Event::Stopped { at: now_micros() });
}
