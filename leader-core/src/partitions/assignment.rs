//! Which live node each partition belongs to: every node computes it alike from the
//! partition count, the members and who holds each partition, without talking to the
//! others.
//!
//! Each member's cap is its share, `count * weight / total weight`, rounded down, and the
//! `r` partitions the rounding leaves over (fewer than there are members) add one to the
//! caps of `r` members: those the rounding cut most, then by a hash of their identity and
//! the count. Without weights, `floor(count / n)` or `ceil(count / n)` each.
//!
//! The table is sticky: each member keeps what it holds, up to its cap, and only the rest
//! moves. Of what a member holds beyond its cap it gives up first the partitions the members
//! with room rank highest (each partition ranks the members by a hash of (partition,
//! member): rendezvous hashing), so that a member back from a restart gets back mostly what
//! it held, then those that rank it lowest. The
//! partitions nobody keeps (held by nobody, by a node that left, or beyond a cap) go, in
//! order, to their best-ranked member that still has room. A join moves the joiner's share
//! and nothing else; a leave, the leaver's partitions only (`leader-bench
//! --partitions-moves` counts them with real nodes). With nobody holding anything, the table
//! is a rendezvous hashing with caps. Weights change the caps, not the ranking, which stays
//! an integer hash: every process and platform computes the same table.

use std::cmp::Reverse;

/// A live member: its identity (see [`identity`]) and its weight (at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Member {
    pub identity: u64,
    pub weight: u32,
}

/// How many partitions each of `members` may own: its share of `count` by weight, rounded
/// down, and one more for as many members as the rounding left partitions over.
pub(crate) fn caps(count: u32, members: &[Member]) -> Vec<usize> {
    let total: u64 = members.iter().map(|member| u64::from(member.weight.max(1))).sum();
    if total == 0 {
        return Vec::new();
    }
    let exact = |member: &Member| u64::from(count) * u64::from(member.weight.max(1));
    let mut caps: Vec<usize> =
        members.iter().map(|member| (exact(member) / total) as usize).collect();
    let left_over = count as usize - caps.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&i| {
        let member = &members[i];
        Reverse((exact(member) % total, mix(member.identity ^ u64::from(count)), member.identity))
    });
    for &i in order.iter().take(left_over) {
        caps[i] += 1;
    }
    caps
}

/// The assignment of `count` partitions to `members` (sorted by identity, no two alike),
/// given `holders` (by partition, the index into `members` of the member holding it, if any;
/// missing entries hold nothing): the index into `members` of each partition's owner. Empty
/// when there is no member.
pub(crate) fn assign(count: u32, members: &[Member], holders: &[Option<usize>]) -> Vec<usize> {
    let n = members.len();
    if n == 0 {
        return Vec::new();
    }
    let caps = caps(count, members);
    let seeds: Vec<u64> = members.iter().map(|member| mix(member.identity)).collect();
    let mut holdings: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (partition, holder) in holders.iter().enumerate().take(count as usize) {
        if let Some(holder) = holder.filter(|&holder| holder < n) {
            holdings[holder].push(partition as u32);
        }
    }
    // Those with room: what the others give up goes first to what they want most.
    let needy: Vec<usize> =
        (0..n).filter(|&member| holdings[member].len() < caps[member]).collect();
    let mut load = vec![0usize; n];
    let mut owner = vec![usize::MAX; count as usize];
    for (member, held) in holdings.iter().enumerate() {
        for partition in kept_of(held, member, &seeds, caps[member], &needy) {
            owner[partition as usize] = member;
            load[member] += 1;
        }
    }
    // What nobody keeps: as many partitions as there is room left (the caps sum to the
    // count), so each finds a member with room.
    for (partition, owner) in owner.iter_mut().enumerate() {
        if *owner != usize::MAX {
            continue;
        }
        let best = (0..n)
            .filter(|&member| load[member] < caps[member])
            .max_by_key(|&member| (score(partition as u64, seeds[member]), member));
        if let Some(best) = best {
            load[best] += 1;
            *owner = best;
        }
    }
    owner
}

/// What `members[me]` keeps of the partitions it holds (`held`), not knowing who has room:
/// all of them up to its cap, and beyond it those that rank it best. Sorted.
pub(crate) fn kept(count: u32, members: &[Member], me: usize, held: &[u32]) -> Vec<u32> {
    let caps = caps(count, members);
    let seeds: Vec<u64> = members.iter().map(|member| mix(member.identity)).collect();
    let mut kept = kept_of(held, me, &seeds, caps.get(me).copied().unwrap_or(0), &[]);
    kept.sort_unstable();
    kept
}

/// Of `held` (by `member`, whose mixed identity is `seeds[member]`), the `cap` it keeps: it
/// gives up first what the `needy` members (those with room) rank highest, so that a member
/// back from a restart gets back what it held, then what ranks `member` lowest.
fn kept_of(held: &[u32], member: usize, seeds: &[u64], cap: usize, needy: &[usize]) -> Vec<u32> {
    if held.len() <= cap {
        return held.to_vec();
    }
    let rank = |partition: u32| {
        let scores: Vec<(u64, usize)> =
            (0..seeds.len()).map(|m| (score(u64::from(partition), seeds[m]), m)).collect();
        let above = |m: usize| scores.iter().filter(|other| **other > scores[m]).count();
        let wanted = needy.iter().map(|&m| above(m)).min().unwrap_or(seeds.len());
        (Reverse(wanted), above(member), Reverse(scores[member].0), partition)
    };
    let mut ranked: Vec<_> = held.iter().map(|&partition| rank(partition)).collect();
    ranked.sort_unstable();
    ranked.into_iter().take(cap).map(|(_, _, _, partition)| partition).collect()
}

/// The partitions `assign` gives to `members[me]`, in order.
pub(crate) fn assigned_to(
    count: u32,
    members: &[Member],
    holders: &[Option<usize>],
    me: usize,
) -> Vec<u32> {
    let owners = assign(count, members, holders);
    (0..count).filter(|&partition| owners[partition as usize] == me).collect()
}

/// A member's identity: its holder id, hashed (FNV-1a, then [`mix`]), the same in every
/// process and version.
pub(crate) fn identity(holder: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in holder.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(hash)
}

/// How much `partition` wants a member whose mixed identity is `seed`.
fn score(partition: u64, seed: u64) -> u64 {
    mix(seed ^ partition.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// splitmix64's finalizer: a fixed bijection that spreads every input bit over the output,
/// the same in every process and version (std's hashers promise neither).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unweighted(identities: &[u64]) -> Vec<Member> {
        let mut members: Vec<Member> =
            identities.iter().map(|&identity| Member { identity, weight: 1 }).collect();
        members.sort_unstable();
        members
    }

    fn loads(count: u32, members: &[Member]) -> Vec<usize> {
        let mut loads = vec![0; members.len()];
        for owner in assign(count, members, &[]) {
            loads[owner] += 1;
        }
        loads
    }

    #[test]
    fn every_member_gets_floor_or_ceil_of_its_share() {
        for n in 1..=12u64 {
            for count in [0u32, 1, 2, 7, 64, 100, 1000, 1023] {
                let members = unweighted(&(0..n).map(|i| 1000 + i * 7919).collect::<Vec<_>>());
                let loads = loads(count, &members);
                let (floor, ceil) =
                    (count as usize / n as usize, (count as usize).div_ceil(n as usize));
                assert_eq!(loads.iter().sum::<usize>(), count as usize);
                assert!(loads.iter().all(|&l| l == floor || l == ceil), "{count}/{n}: {loads:?}");
                assert_eq!(caps(count, &members), loads, "the caps are the loads");
            }
        }
    }

    #[test]
    fn nobody_means_no_owner() {
        assert!(assign(10, &[], &[]).is_empty());
    }

    /// Owners by identity, to compare tables of different member lists.
    type Owners = Vec<Option<u64>>;

    /// The table of `members` when the partitions are held as `before` says (by identity;
    /// a holder that is no member holds nothing), by identity.
    fn next(count: u32, members: &[Member], before: &Owners) -> Owners {
        let holders: Vec<Option<usize>> = before
            .iter()
            .map(|holder| {
                holder.and_then(|identity| members.iter().position(|m| m.identity == identity))
            })
            .collect();
        assign(count, members, &holders)
            .iter()
            .map(|&owner| Some(members[owner].identity))
            .collect()
    }

    fn moved(before: &Owners, after: &Owners) -> usize {
        before.iter().zip(after).filter(|(a, b)| a != b).count()
    }

    fn draw(seed: u64, n: u64) -> Vec<u64> {
        (0..n).map(|i| mix(seed * 1000 + i)).collect()
    }

    /// A member holding what the table gave it keeps it: the table of the same members is
    /// the same when each holds its share.
    #[test]
    fn a_balanced_table_stays_as_it_is() {
        let members = unweighted(&draw(7, 5));
        let table = next(1000, &members, &vec![None; 1000]);
        assert_eq!(next(1000, &members, &table), table);
    }

    /// A join moves the joiner's share and nothing else; a leave, the leaver's partitions
    /// and nothing else. Of 1,000 partitions on 9 members, over 50 draws of identities.
    #[test]
    fn a_join_or_a_leave_moves_only_the_share_that_changes_hands() {
        for seed in 0..50u64 {
            let identities = draw(seed, 10);
            let (nine, ten) = (unweighted(&identities[..9]), unweighted(&identities));
            let before = next(1000, &nine, &vec![None; 1000]);
            let after = next(1000, &ten, &before);
            let joiner = Some(identities[9]);
            let share = after.iter().filter(|&&owner| owner == joiner).count();
            assert_eq!(share, 100);
            assert_eq!(moved(&before, &after), share, "a join of 1 to 9, draw {seed}");
            let left = next(1000, &nine, &after);
            let leavers = after.iter().filter(|&&owner| owner == joiner).count();
            assert_eq!(moved(&after, &left), leavers, "a leave of 1 of 10, draw {seed}");
        }
    }

    /// A rolling restart (each member leaves, the others take its partitions, and it joins
    /// again) moves each partition the leaver held twice: out and back (to the rejoined
    /// member or another). Over 20 draws of 9 members on 1,000 partitions, no partition moves
    /// more than 6 times (printed).
    #[test]
    fn a_rolling_restart_moves_only_what_the_restarted_members_held() {
        let mut most = 0;
        for seed in 0..20u64 {
            let members = unweighted(&draw(seed, 9));
            let mut table = next(1000, &members, &vec![None; 1000]);
            let mut per_partition = vec![0u32; 1000];
            let mut minimum = 0;
            for restarted in &members {
                let others: Vec<Member> =
                    members.iter().filter(|m| m != &restarted).copied().collect();
                minimum += 2 * table.iter().filter(|&&o| o == Some(restarted.identity)).count();
                for step in [others.as_slice(), members.as_slice()] {
                    let after = next(1000, step, &table);
                    for (moves, (a, b)) in per_partition.iter_mut().zip(table.iter().zip(&after)) {
                        *moves += u32::from(a != b);
                    }
                    table = after;
                }
            }
            assert_eq!(per_partition.iter().sum::<u32>() as usize, minimum, "draw {seed}");
            most = most.max(*per_partition.iter().max().unwrap());
        }
        println!("most moves of one partition in a rolling restart of 9 on 1,000: {most}");
        assert!(most <= 6, "{most}");
    }

    /// Beyond its cap a member keeps the partitions that rank it best.
    #[test]
    fn beyond_its_cap_a_member_keeps_what_ranks_it_best() {
        let members = unweighted(&draw(3, 4));
        let seeds: Vec<u64> = members.iter().map(|member| mix(member.identity)).collect();
        let held: Vec<u32> = (0..100).collect();
        let kept = kept(100, &members, 0, &held);
        assert_eq!(kept.len(), caps(100, &members)[0]);
        let first_choice = |partition: u32| {
            (0..4).max_by_key(|&m| (score(u64::from(partition), seeds[m]), m)) == Some(0)
        };
        let first: Vec<u32> = held.iter().copied().filter(|&p| first_choice(p)).collect();
        assert!(first.len() <= kept.len());
        assert!(first.iter().all(|p| kept.contains(p)), "{first:?} not all in {kept:?}");
    }

    /// With weights, each member's share is `count * weight / total`, rounded down or up,
    /// and a member of weight 2 owns twice what one of weight 1 does.
    #[test]
    fn weighted_members_get_shares_in_proportion() {
        for count in [7u32, 64, 100, 1000] {
            let members = vec![
                Member { identity: 11, weight: 1 },
                Member { identity: 22, weight: 2 },
                Member { identity: 33, weight: 3 },
                Member { identity: 44, weight: 1 },
            ];
            let loads = loads(count, &members);
            assert_eq!(loads.iter().sum::<usize>(), count as usize);
            for (member, load) in members.iter().zip(&loads) {
                let exact = f64::from(count) * f64::from(member.weight) / 7.0;
                assert!(
                    (exact.floor()..=exact.ceil()).contains(&(*load as f64)),
                    "{count}: {loads:?}"
                );
            }
        }
    }

    /// Weights of 1 are no weights: the table is the unweighted one.
    #[test]
    fn weights_of_one_change_nothing() {
        let members = unweighted(&[3, 1, 4, 15, 9, 2, 6]);
        let doubled: Vec<Member> =
            members.iter().map(|member| Member { weight: 2, ..*member }).collect();
        assert_eq!(
            assign(1000, &members, &[]),
            assign(1000, &doubled, &[]),
            "equal weights are no weights"
        );
    }
}
