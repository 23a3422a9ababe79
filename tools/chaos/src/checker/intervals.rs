//! Counting intervals: the most that overlap at one instant, the longest stretch fewer than
//! `n` cover, and the first instant `n` cover.

use std::time::Duration;

/// The most intervals `[start, end)` covering one instant.
pub(super) fn most_overlapping(intervals: impl Iterator<Item = (u64, u64)>) -> usize {
    let mut edges: Vec<(u64, i32)> =
        intervals.filter(|(s, e)| e > s).flat_map(|(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_unstable(); // an end (-1) sorts before a start (+1) at the same instant
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// The longest stretch within `[from, to)` that fewer than `n` intervals cover.
pub(super) fn longest_short(intervals: &[(u64, u64)], from: u64, to: u64, n: usize) -> Duration {
    let mut edges: Vec<(u64, i32)> =
        intervals.iter().filter(|(s, e)| e > s).flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_unstable();
    let (mut now, mut short_since, mut longest) = (0i32, None, 0u64);
    for (at, step) in edges {
        let was_short = now < n as i32;
        now += step;
        let is_short = now < n as i32;
        if !was_short && is_short {
            short_since = Some(at);
        } else if was_short
            && !is_short
            && let Some(since) = short_since.take()
        {
            let (since, until) = (since.max(from), at.min(to));
            longest = longest.max(until.saturating_sub(since));
        }
    }
    Duration::from_micros(longest)
}

/// The first instant at or after `from` that `n` intervals cover.
pub(super) fn first_covered(
    intervals: impl Iterator<Item = (u64, u64)>,
    from: u64,
    n: usize,
) -> Option<u64> {
    let mut edges: Vec<(u64, i32)> = intervals
        .filter(|(_, e)| *e > from)
        .map(|(s, e)| (s.max(from), e))
        .filter(|(s, e)| e > s)
        .flat_map(|(s, e)| [(s, 1), (e, -1)])
        .collect();
    edges.sort_unstable();
    let mut now = 0i32;
    for (at, step) in edges {
        now += step;
        if now >= n as i32 {
            return Some(at);
        }
    }
    None
}
