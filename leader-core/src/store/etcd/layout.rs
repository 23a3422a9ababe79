//! Where a group lives in etcd's key space, and what its keys hold.
//!
//! Group keys never contain whitespace (keys are validated so), so a space after the group
//! key ends it: the range `{prefix}{key} ` holds one group's keys and no other group's.
//!
//! | key | value | lease |
//! |---|---|---|
//! | `{prefix}{key} slot {i}` | one live slot: token, grant time, TTL, `max_leaders`, lock-delay, holder | the slot's, kept alive by its holder |
//! | `{prefix}{key} last {i}` | `held {ttl} {max_leaders}`: slot `i`'s holder, granted under that size, has not released it | a marker lease, never kept alive |
//! | `{prefix}{key} max` | the `max_leaders` of the group's latest grant, for the next guess | a marker lease |
//! | `{prefix}{key} last claim` | `{token} {arrival µs} {hold ms} {priority} {holder}`: the group's claim on its next free slot (see `claim.rs`) | its own, kept alive by its holder's requests |
//! | `{prefix}{key} preferred` | `{until ms since the epoch} {holder}`: the holder an operator prefers for the group (see `claim.rs`) | its own, of the preference's time |
//! | `{prefix}{key} last unanswered {lease}` | empty: a grant on session lease `{lease}` got no answer, and every grant decided before this key was written can no longer commit (see `sessions.rs`) | that session's |
//!
//! The fence of a slot is its key's `create_revision`: etcd's revision, which counts every
//! write of the cluster, never goes back, and survives the loss of any minority of members.
//! The group's size is the `max_leaders` its live slots carry (all alike); a group with no
//! live slot has none (the `max` key only lets a guess skip the read; see `acquire.rs`). A holder's release deletes both of its keys, so a group nobody uses
//! leaves nothing once its markers' leases have run out.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::KeyValue;

use super::MAX_TTL_SECS;
use crate::error::Error;
use crate::token::LeaseToken;

/// The longest group key this store takes, in bytes: each transaction carries the key a
/// few times, and etcd refuses requests over its `--max-request-bytes` (1.5 MiB by default).
pub(crate) const MAX_KEY_BYTES: usize = 4096;

/// The keys of one group, under one store prefix.
#[derive(Debug, Clone)]
pub(crate) struct GroupKeys {
    /// `{prefix}{key} `: every key of the group starts so.
    pub range: String,
}

impl GroupKeys {
    pub(crate) fn new(prefix: &str, key: &str) -> Self {
        GroupKeys { range: format!("{prefix}{key} ") }
    }

    /// The `max_leaders` of the latest grant.
    pub(crate) fn max(&self) -> String {
        format!("{}max", self.range)
    }

    /// Slot `index`.
    pub(crate) fn slot(&self, index: u32) -> String {
        format!("{}slot {index}", self.range)
    }

    /// The start of every slot key.
    pub(crate) fn slots(&self) -> String {
        format!("{}slot ", self.range)
    }

    /// Slot `index`'s marker.
    pub(crate) fn last(&self, index: u32) -> String {
        format!("{}last {index}", self.range)
    }

    /// The group's claim on its next free slot (see `claim.rs`): under the markers' range,
    /// which every grant compares, and no index's marker.
    pub(crate) fn claim(&self) -> String {
        format!("{}last claim", self.range)
    }

    /// The key that fences off the grants decided before it was written, on behalf of an
    /// unanswered grant on session lease `lease` (see `sessions.rs`): under the markers'
    /// range, which every grant compares, and no index's marker.
    pub(crate) fn unanswered(&self, lease: i64) -> String {
        format!("{}last unanswered {lease:x}", self.range)
    }

    /// The holder an operator prefers for the group (see `claim.rs`): outside the markers'
    /// range, so a preference made meanwhile never makes a grant decide again.
    pub(crate) fn preferred(&self) -> String {
        format!("{}preferred", self.range)
    }

    /// The start of every marker key.
    pub(crate) fn markers(&self) -> String {
        format!("{}last ", self.range)
    }

    /// What a key of this group is, from its full name.
    pub(crate) fn part_of(&self, key: &[u8]) -> Option<Part> {
        let rest = key.strip_prefix(self.range.as_bytes())?;
        let rest = std::str::from_utf8(rest).ok()?;
        match rest.split_once(' ') {
            None if rest == "max" => Some(Part::Max),
            None if rest == "preferred" => Some(Part::Preferred),
            Some(("slot", index)) => index.parse().ok().map(Part::Slot),
            Some(("last", "claim")) => Some(Part::Claim),
            Some(("last", index)) => index.parse().ok().map(Part::Last),
            _ => None,
        }
    }
}

/// One key of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Max,
    Slot(u32),
    Last(u32),
    Claim,
    Preferred,
}

/// A live slot, as its key holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    pub index: u32,
    pub token: LeaseToken,
    /// The key's `create_revision`.
    pub fence: u64,
    /// The etcd lease the key is bound to.
    pub lease: i64,
    /// The lease's TTL, in whole seconds, as granted.
    pub ttl: i64,
    /// The group's size it was granted under.
    pub max_leaders: u32,
    /// When the slot was granted, on the granting client's clock.
    pub acquired_at: SystemTime,
    /// While its grant waits out a lock-delay (it took the index over from a holder that
    /// may still act): that holder's TTL. A pending slot is no leader yet; its holder
    /// writes it again without the delay once the delay is over.
    pub delay_ttl: Option<i64>,
    pub holder: String,
}

/// What a slot key holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotValue<'a> {
    pub token: LeaseToken,
    pub acquired_at: SystemTime,
    pub ttl: i64,
    pub max_leaders: u32,
    pub delay_ttl: Option<i64>,
    pub holder: &'a str,
}

impl SlotValue<'_> {
    /// `{token} {acquired µs} {ttl} {max_leaders} {lock-delay ttl, 0 for none} {holder}`.
    pub(crate) fn encode(&self) -> String {
        let micros = self.acquired_at.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
        let delay = self.delay_ttl.unwrap_or(0);
        format!("{} {micros} {} {} {delay} {}", self.token, self.ttl, self.max_leaders, self.holder)
    }
}

impl Slot {
    /// The value to write for this slot.
    pub(crate) fn value(&self) -> SlotValue<'_> {
        SlotValue {
            token: self.token,
            acquired_at: self.acquired_at,
            ttl: self.ttl,
            max_leaders: self.max_leaders,
            delay_ttl: self.delay_ttl,
            holder: &self.holder,
        }
    }

    /// The slot a key holds; an error naming the key for a value this store did not write
    /// (a TTL out of etcd's range included), so nothing is decided on it.
    pub(crate) fn read(index: u32, kv: &KeyValue) -> Result<Slot, Error> {
        let parsed = (|| {
            let value = std::str::from_utf8(kv.value()).ok()?;
            let mut fields = value.splitn(6, ' ');
            let token = fields.next()?.parse().ok()?;
            // At most the end of year 9999 (what clocks and formatters can show).
            let micros: u64 = fields.next()?.parse().ok().filter(|micros| *micros <= MAX_MICROS)?;
            let ttl = ttl(fields.next()?)?;
            let max_leaders = fields.next()?.parse().ok().filter(|max| *max > 0)?;
            let delay: i64 = fields.next()?.parse().ok()?;
            let delay_ttl = match delay {
                0 => None,
                _ => Some(ttl_value(delay)?),
            };
            let holder = fields.next().unwrap_or_default().to_owned();
            Some(Slot {
                index,
                token,
                fence: u64::try_from(kv.create_revision()).ok()?,
                lease: kv.lease(),
                ttl,
                max_leaders,
                acquired_at: UNIX_EPOCH + Duration::from_micros(micros),
                delay_ttl,
                holder,
            })
        })();
        parsed.ok_or_else(|| not_ours(kv, "a slot"))
    }

    /// Whether the slot still waits out a lock-delay.
    pub(crate) fn is_pending(&self) -> bool {
        self.delay_ttl.is_some()
    }
}

/// A marker's value: slot `index`'s holder, granted under a size of `max_leaders`, has not
/// released it, and holds a lease of `ttl` seconds: if the slot is gone, the lease expired
/// or was revoked, and its holder may act until one TTL after that.
pub(crate) fn held_marker(ttl: i64, max_leaders: u32) -> String {
    format!("held {ttl} {max_leaders}")
}

/// What a marker says: its holder's TTL, the size it was granted under, and the lease the
/// marker lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker {
    pub ttl: i64,
    pub max_leaders: u32,
    pub lease: i64,
}

/// The marker a key holds; an error naming the key for a value this store did not write (a
/// TTL out of etcd's range, a size of zero, or no marker lease: this store binds every
/// marker to one).
pub(crate) fn read_marker(kv: &KeyValue) -> Result<Marker, Error> {
    let parsed = (|| {
        let value = std::str::from_utf8(kv.value()).ok()?.strip_prefix("held ")?;
        let (ttl_text, max_text) = value.split_once(' ')?;
        let max_leaders = max_text.parse().ok().filter(|max| *max > 0)?;
        let lease = Some(kv.lease()).filter(|lease| *lease != 0)?;
        Some(Marker { ttl: ttl(ttl_text)?, max_leaders, lease })
    })();
    parsed.ok_or_else(|| not_ours(kv, "a marker"))
}

/// The latest grant time a slot may record: the end of year 9999, in µs since the epoch.
const MAX_MICROS: u64 = 253_402_300_799_999_999;

/// A TTL field: whole seconds within etcd's range.
fn ttl(text: &str) -> Option<i64> {
    ttl_value(text.parse().ok()?)
}

fn ttl_value(ttl: i64) -> Option<i64> {
    (1..=MAX_TTL_SECS).contains(&ttl).then_some(ttl)
}

/// The refusal of a key whose value this store did not write.
fn not_ours(kv: &KeyValue, what: &str) -> Error {
    let key = String::from_utf8_lossy(kv.key()).into_owned();
    let found = String::from_utf8_lossy(kv.value()).chars().take(64).collect::<String>();
    Error::WrongType { key, found: format!("{found:?}, which is not {what} this store wrote") }
}

/// `time`, to the microsecond below (as a slot's record keeps it).
pub(crate) fn to_micros(time: SystemTime) -> SystemTime {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    UNIX_EPOCH + Duration::from_micros(u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_range_holds_no_other_group() {
        let group = GroupKeys::new("app/", "leader:a");
        assert_eq!(group.slot(2), "app/leader:a slot 2");
        assert_eq!(group.part_of(b"app/leader:a slot 2"), Some(Part::Slot(2)));
        assert_eq!(group.part_of(b"app/leader:a last 0"), Some(Part::Last(0)));
        assert_eq!(group.part_of(b"app/leader:ab slot 2"), None);
        assert_eq!(group.part_of(b"app/leader:a slot x"), None);
        assert!(!"app/leader:a/b slot 0".starts_with(&group.range));
    }

    #[test]
    fn ttls_out_of_range_are_refused() {
        assert_eq!(ttl("7"), Some(7));
        for bad in ["0", "-3", "1x", "", "9000000001", "99999999999999999999"] {
            assert_eq!(ttl(bad), None, "{bad}");
        }
    }
}
