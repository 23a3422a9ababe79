//! The node's share: what it keeps of what it holds, and, while the members give it room
//! for more, what nobody keeps that the table gives it (`assignment.rs`); what left the share
//! is handed over, what joined it claimed.
//!
//! A node that holds its cap needs nobody else's holdings: it keeps what it holds. One with
//! room for more, or holding more than its cap, keeps what it holds up to its cap (and its
//! claims, within the cap) at once, then reads who holds each partition beside its loop
//! ([`LeaseStore::state_many`](crate::LeaseStore::state_many)) and follows the table: it
//! claims what the others give up or nobody holds, or gives up what those with room want
//! most. Two nodes that read different holders may claim the same partition: one wins it,
//! and the other, still with room, reads the holders again at its next read and claims
//! another. A node whose read of the holders failed keeps what ranks it best, up to its cap.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::assignment::{Member, assigned_to, caps, identity, kept};
use super::node::Node;
use super::options::{Settings, announced};
use crate::error::Error;
use crate::store::GroupSnapshot;
use crate::telemetry;

impl Node {
    /// The partitions the node holds and has not started handing over, in order.
    pub(super) fn holding(&self) -> Vec<u32> {
        let held = self.held.iter().filter(|(_, held)| !held.cell.is_revoked());
        held.map(|(index, _)| *index).collect()
    }

    /// Owns nothing: no share, every partition handed over, every claim withdrawn (giving
    /// back what they won or may have won).
    pub(super) fn follow_nobody(&mut self) {
        self.share.clear();
        for index in self.holding() {
            self.hand_over(index);
        }
        self.claims.withdraw_all();
        self.members.clear();
        self.view_stale = true;
    }

    /// Takes the share the table gives this node among `members` (sorted, this node among
    /// them; announced in `group`), given who holds each partition (`owners`, the partitions'
    /// groups in order, read after those members): what left it is handed over, what joined
    /// it claimed. Without `owners` (a read of the members), the node keeps what it holds
    /// and the claims it made already, up to its cap, and reads the holders beside its loop
    /// if it holds other than its cap; beyond its cap it gives nothing up until it has read
    /// them, or, if they were `unreadable`, gives up what ranks it lowest.
    pub(super) fn follow(
        &mut self,
        members: Vec<Member>,
        group: GroupSnapshot,
        owners: Option<&[GroupSnapshot]>,
        unreadable: bool,
    ) {
        let settings = Arc::clone(&self.settings);
        let me = identity(&settings.member_holder);
        let position =
            members.binary_search_by_key(&me, |member| member.identity).expect("a member");
        let cap = caps(settings.count, &members)[position];
        if members != self.members {
            tracing::info!(set = %settings.name, members = members.len(), cap, "partition members changed");
            self.members = members;
            self.view_stale = true;
        }
        let members = &self.members;
        let holding = self.holding();
        let share = match owners {
            Some(owners) => {
                let mut holders = holders(&settings, members, &group, owners);
                for (partition, holder) in holders.iter_mut().enumerate() {
                    if *holder == Some(position) {
                        *holder = None;
                    }
                    if holding.binary_search(&(partition as u32)).is_ok() {
                        *holder = Some(position);
                    }
                }
                assigned_to(settings.count, members, &holders, position)
            }
            // Beyond its cap, the node waits for the holders to say what to give up (what
            // those with room want most), unless it cannot read them.
            None if holding.len() >= cap => {
                // After a failed read, the next read of the members asks again.
                self.holders_wanted = !unreadable && holding.len() != cap;
                match unreadable {
                    true => kept(settings.count, members, position, &holding),
                    false => holding.clone(),
                }
            }
            None => {
                self.holders_wanted = !unreadable;
                let room = cap - holding.len();
                let claimed = self.share.iter().filter(|i| holding.binary_search(i).is_err());
                let mut share: Vec<u32> = claimed.take(room).copied().collect();
                share.extend(&holding);
                share.sort_unstable();
                share
            }
        };
        self.announcements = group;
        if share != self.share {
            self.share = share;
            self.view_stale = true;
        }
        let share: BTreeSet<u32> = self.share.iter().copied().collect();
        for index in holding.into_iter().filter(|index| !share.contains(index)) {
            self.hand_over(index);
        }
        self.claims.withdraw_unless(|index| share.contains(&index));
        for index in self.share.clone() {
            self.claim_if_wanted(index);
        }
    }

    /// The read of every partition's holder, to run beside the loop: for the members last
    /// read.
    pub(super) fn holders_read(&self) -> impl Future<Output = HoldersRead> + Send + 'static {
        let (settings, store) = (Arc::clone(&self.settings), Arc::clone(&self.store));
        let (members, group) = (self.members.clone(), self.announcements.clone());
        async move {
            let keys: Vec<&str> = settings.partition_keys.iter().map(String::as_str).collect();
            let owners = telemetry::state_many(&*store, &keys).await;
            HoldersRead { members, group, owners }
        }
    }

    /// A read of the holders: the table followed, if the members did not change meanwhile
    /// (a read of the new ones asks for another).
    pub(super) fn on_holders_read(&mut self, read: HoldersRead) {
        let HoldersRead { members, group, owners } = read;
        match owners {
            Err(error) => {
                tracing::warn!(set = %self.settings.name, error = %crate::error_chain(&error), "reading the partitions' holders failed; retrying at the next read of the members");
                if members == self.members && !members.is_empty() {
                    self.follow(members, group, None, true);
                }
            }
            Ok(owners) if members == self.members && !members.is_empty() => {
                self.follow(members, group, Some(&owners), false);
            }
            Ok(_) => {}
        }
    }
}

/// A read of every partition's holder, for `members` (announced in `group`).
pub(super) struct HoldersRead {
    members: Vec<Member>,
    group: GroupSnapshot,
    owners: Result<Vec<GroupSnapshot>, Error>,
}

/// By partition, the index into `members` of the member that holds it in `owners` (its
/// group's first live or pending slot, under the holder id a member announced in `group`);
/// `None` for a partition held by nobody or by a node that is no member.
fn holders(
    settings: &Settings,
    members: &[Member],
    group: &GroupSnapshot,
    owners: &[GroupSnapshot],
) -> Vec<Option<usize>> {
    let index_of = |identity: u64| {
        members.binary_search_by_key(&identity, |member: &Member| member.identity).ok()
    };
    let mut by_holder: BTreeMap<&str, usize> = BTreeMap::new();
    let announcements = group.leaders.iter().chain(&group.pending).map(|slot| &*slot.holder);
    for holder in announcements.chain([&*settings.member_holder]) {
        if let (Some((id, _, _)), Some(index)) = (announced(holder), index_of(identity(holder))) {
            by_holder.insert(id, index);
        }
    }
    owners
        .iter()
        .map(|partition| {
            let slot = partition.leaders.first().or(partition.pending.first())?;
            by_holder.get(&*slot.holder).copied()
        })
        .collect()
}

/// The members `group` lists, sorted by identity, with this node (whose announcement's
/// holder is `holder`) among them: a read may come from a replica a little behind.
pub(super) fn members_of(group: &GroupSnapshot, holder: &str) -> Vec<Member> {
    let slots = group.leaders.iter().chain(&group.pending);
    let mut members: Vec<Member> = slots.map(|slot| member(&slot.holder)).collect();
    members.push(member(holder));
    members.sort_unstable();
    members.dedup_by_key(|member| member.identity);
    members
}

/// The member an announcement's holder names: its identity, and the weight it announced
/// (1 for a holder of another form).
fn member(holder: &str) -> Member {
    let weight = announced(holder).map_or(1, |(_, _, weight)| weight.max(1));
    Member { identity: identity(holder), weight }
}
