//! Which live node each partition belongs to: a pure function of the partition count and
//! the members, so every node that reads the same members computes the same assignment
//! without talking to the others.
//!
//! Each member's share is `count * weight / total weight`, rounded down, and the `r`
//! partitions the rounding leaves over (fewer than there are members) go one to a member:
//! without weights, `floor(count / n)` or `ceil(count / n)` each. Each partition ranks the
//! members by a hash of (partition, member) (rendezvous hashing), and the partitions, in
//! order, go to their best-ranked member that still has room: first up to each member's
//! rounded-down share, then the left-over ones to their best-ranked member with no extra
//! yet. A member joining or leaving moves mostly the partitions that rank it first; the
//! caps move a few more (measured in the tests below and by `leader-bench
//! --partitions-moves`). No function of the members alone can move only the leaver's
//! partitions and keep every share within one of the others (docs/partitions.md).
//! Weights change the shares, not the ranking, which stays an integer hash: every process
//! and platform computes the same table.

/// A live member: its identity (see [`identity`]) and its weight (at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Member {
    pub identity: u64,
    pub weight: u32,
}

/// The assignment of `count` partitions to `members` (in any order; no two with the same
/// identity): the index into `members` of each partition's owner. Empty when there is no
/// member.
pub(crate) fn assign(count: u32, members: &[Member]) -> Vec<usize> {
    let n = members.len();
    if n == 0 {
        return Vec::new();
    }
    let total: u64 = members.iter().map(|member| u64::from(member.weight.max(1))).sum();
    let floors: Vec<usize> = members
        .iter()
        .map(|member| (u64::from(count) * u64::from(member.weight.max(1)) / total) as usize)
        .collect();
    let mut load = vec![0usize; n];
    let mut owner = vec![usize::MAX; count as usize];
    let seeds: Vec<u64> = members.iter().map(|member| mix(member.identity)).collect();
    // First pass: each member up to its rounded-down share; second pass: the rest, one extra
    // per member at most (fewer are left over than there are members, so each finds one).
    for extra in [0, 1] {
        for (partition, owner) in owner.iter_mut().enumerate() {
            if *owner != usize::MAX {
                continue;
            }
            let best = (0..n)
                .filter(|&member| load[member] < floors[member] + extra)
                .max_by_key(|&member| (score(partition as u64, seeds[member]), member));
            if let Some(best) = best {
                load[best] += 1;
                *owner = best;
            }
        }
    }
    owner
}

/// The partitions `assign` gives to `members[me]`, in order.
pub(crate) fn assigned_to(count: u32, members: &[Member], me: usize) -> Vec<u32> {
    let owners = assign(count, members);
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
        identities.iter().map(|&identity| Member { identity, weight: 1 }).collect()
    }

    fn loads(count: u32, members: &[Member]) -> Vec<usize> {
        let mut loads = vec![0; members.len()];
        for owner in assign(count, members) {
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
            }
        }
    }

    #[test]
    fn the_assignment_depends_on_the_members_not_their_order() {
        let members = unweighted(&[5u64, 17, 3, 99]);
        let mut reversed = members.clone();
        reversed.reverse();
        let by_member = |members: &[Member]| {
            let owners = assign(64, members);
            owners.iter().map(|&owner| members[owner]).collect::<Vec<_>>()
        };
        assert_eq!(by_member(&members), by_member(&reversed));
    }

    #[test]
    fn nobody_means_no_owner() {
        assert!(assign(10, &[]).is_empty());
    }

    /// Owners by identity, to compare tables of different member lists.
    fn owners(count: u32, members: &[Member]) -> Vec<u64> {
        assign(count, members).iter().map(|&owner| members[owner].identity).collect()
    }

    fn moved(before: &[u64], after: &[u64]) -> usize {
        before.iter().zip(after).filter(|(a, b)| a != b).count()
    }

    /// A join moves the joiner's share and a few more (the caps' cascade), never the whole
    /// table; a leave, its reverse, the leaver's share and as many more. Of 1,000
    /// partitions on 9 members, over 50 draws of identities: at most 40 more than the 100
    /// the joiner takes (`leader-bench --partitions-moves` prints the figures).
    #[test]
    fn a_join_or_a_leave_moves_little_more_than_the_share_that_changes_hands() {
        let mut worst = 0;
        for draw in 0..50u64 {
            let identities: Vec<u64> = (0..10).map(|i| mix(draw * 1000 + i)).collect();
            let nine = unweighted(&identities[..9]);
            let ten = unweighted(&identities);
            let (before, after) = (owners(1000, &nine), owners(1000, &ten));
            let share = after.iter().filter(|&&owner| owner == identities[9]).count();
            assert!((100..=100).contains(&share), "{share}");
            let extra = moved(&before, &after) - share;
            worst = worst.max(extra);
        }
        println!("worst extra moves of a join of 1 to 9 on 1,000: {worst}");
        assert!(worst <= 40, "{worst} partitions moved beyond the joiner's share");
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
        assert_eq!(assign(1000, &members), assign(1000, &doubled), "equal weights are no weights");
    }
}
