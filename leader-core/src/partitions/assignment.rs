//! Which live node each partition belongs to: a pure function of the partition count and
//! the members, so every node that reads the same members computes the same assignment
//! without talking to the others.
//!
//! Each partition ranks the members by a hash of (partition, member) (rendezvous hashing),
//! and the partitions, in order, go to their best-ranked member that still has room: first
//! up to `count / n` partitions per member, then the `count % n` left over to their
//! best-ranked member with no extra yet. So every member gets `floor(count / n)` or
//! `ceil(count / n)`, and a member joining or leaving moves mostly the partitions that rank
//! it first (measured in the tests below).

/// The assignment of `count` partitions to `members` (their identities, in any order; no
/// two equal): the index into `members` of each partition's owner. Empty when there is no
/// member.
pub(crate) fn assign(count: u32, members: &[u64]) -> Vec<usize> {
    let n = members.len();
    if n == 0 {
        return Vec::new();
    }
    let base = count as usize / n;
    let mut load = vec![0usize; n];
    let mut owner = vec![usize::MAX; count as usize];
    let seeds: Vec<u64> = members.iter().map(|&member| mix(member)).collect();
    // First pass: each member up to `base`; second pass: the rest, one extra per member at
    // most (fewer are left over than there are members, so each finds one).
    for cap in [base, base + 1] {
        for (partition, owner) in owner.iter_mut().enumerate() {
            if *owner != usize::MAX {
                continue;
            }
            let best = (0..n)
                .filter(|&member| load[member] < cap)
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
pub(crate) fn assigned_to(count: u32, members: &[u64], me: usize) -> Vec<u32> {
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

    fn loads(count: u32, members: &[u64]) -> Vec<usize> {
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
                let members: Vec<u64> = (0..n).map(|i| 1000 + i * 7919).collect();
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
        let members = [5u64, 17, 3, 99];
        let mut reversed = members;
        reversed.reverse();
        let by_member = |members: &[u64]| {
            let owners = assign(64, members);
            owners.iter().map(|&owner| members[owner]).collect::<Vec<_>>()
        };
        assert_eq!(by_member(&members), by_member(&reversed));
    }

    #[test]
    fn nobody_means_no_owner() {
        assert!(assign(10, &[]).is_empty());
    }

    /// A join moves about the joiner's share, not the whole table: of 1,000 partitions on 9
    /// members, a tenth joining moves at most twice its share (100) here.
    #[test]
    fn a_join_moves_little_more_than_the_joiners_share() {
        let mut members: Vec<u64> = (1..=9).collect();
        let before = assign(1000, &members);
        let before: Vec<u64> = before.iter().map(|&o| members[o]).collect();
        members.push(10);
        let after = assign(1000, &members);
        let after: Vec<u64> = after.iter().map(|&o| members[o]).collect();
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        assert!((100..=200).contains(&moved), "{moved} partitions moved");
    }
}
