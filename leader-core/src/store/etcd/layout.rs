//! Where a group lives in etcd's key space, and what its keys hold.
//!
//! Group keys never contain whitespace (keys are validated so), so a space after the group
//! key ends it: the range `{prefix}{key} ` holds one group's keys and no other group's.
//!
//! | key | value | lease |
//! |---|---|---|
//! | `{prefix}{key} max` | the `max_leaders` the live slots were granted under | none |
//! | `{prefix}{key} slot {i}` | one live slot: token, grant time, TTL, holder | the slot's |
//! | `{prefix}{key} last {i}` | how slot `i`'s last holder left: `held {ttl}` or `released` | none |
//!
//! The fence of a slot is its key's `create_revision`: etcd's revision, which counts every
//! write of the cluster, never goes back, and survives the loss of any minority of members.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::KeyValue;

use crate::LeaseToken;

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

    /// The group's `max_leaders`.
    pub(crate) fn max(&self) -> String {
        format!("{}max", self.range)
    }

    /// Slot `index`.
    pub(crate) fn slot(&self, index: u32) -> String {
        format!("{}slot {index}", self.range)
    }

    /// The start of every slot key (for "no slot is live").
    pub(crate) fn slots(&self) -> String {
        format!("{}slot ", self.range)
    }

    /// How slot `index`'s last holder left.
    pub(crate) fn last(&self, index: u32) -> String {
        format!("{}last {index}", self.range)
    }

    /// What a key of this group is, from its full name.
    pub(crate) fn part_of(&self, key: &[u8]) -> Option<Part> {
        let rest = key.strip_prefix(self.range.as_bytes())?;
        let rest = std::str::from_utf8(rest).ok()?;
        match rest.split_once(' ') {
            None if rest == "max" => Some(Part::Max),
            Some(("slot", index)) => index.parse().ok().map(Part::Slot),
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
    /// When the slot was granted, on the granting client's clock.
    pub acquired_at: SystemTime,
    /// When its grant took the slot over from a holder that never released it: that
    /// holder's TTL, the lock-delay the grant waits before it is acted on.
    pub delay_ttl: Option<i64>,
    pub holder: String,
}

impl Slot {
    /// A slot key's value: `{token} {acquired µs} {ttl} {lock-delay ttl, 0 for none} {holder}`.
    pub(crate) fn value(
        token: LeaseToken,
        acquired_at: SystemTime,
        ttl: i64,
        delay_ttl: Option<i64>,
        holder: &str,
    ) -> String {
        let micros = acquired_at.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
        format!("{token} {micros} {ttl} {} {holder}", delay_ttl.unwrap_or(0))
    }

    /// The slot a key holds; `None` for a value this store did not write.
    pub(crate) fn read(index: u32, kv: &KeyValue) -> Option<Slot> {
        let value = std::str::from_utf8(kv.value()).ok()?;
        let mut fields = value.splitn(5, ' ');
        let token = fields.next()?.parse().ok()?;
        let micros: u64 = fields.next()?.parse().ok()?;
        let ttl = fields.next()?.parse().ok()?;
        let delay_ttl = fields.next()?.parse::<i64>().ok().filter(|ttl| *ttl > 0);
        let holder = fields.next().unwrap_or_default().to_owned();
        Some(Slot {
            index,
            token,
            fence: u64::try_from(kv.create_revision()).ok()?,
            lease: kv.lease(),
            ttl,
            acquired_at: UNIX_EPOCH + Duration::from_micros(micros),
            delay_ttl,
            holder,
        })
    }
}

/// `time`, to the microsecond below (as a slot's record keeps it).
pub(crate) fn to_micros(time: SystemTime) -> SystemTime {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    UNIX_EPOCH + Duration::from_micros(u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
}

/// How a slot's last holder left, as its `last` key says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastHolder {
    /// Never held, or released: the slot may be used at once.
    Released,
    /// Granted with a lease of `ttl` seconds and never released: if the slot is free, the
    /// lease expired or was revoked, and its holder may act until one TTL after that.
    Held { ttl: i64 },
}

impl LastHolder {
    pub(crate) fn value(self) -> String {
        match self {
            LastHolder::Released => "released".to_owned(),
            LastHolder::Held { ttl } => format!("held {ttl}"),
        }
    }

    /// The state a `last` key's value says; a value this store did not write counts as held
    /// with a long TTL, so it delays rather than admits.
    pub(crate) fn read(value: &[u8]) -> LastHolder {
        match std::str::from_utf8(value).ok().and_then(|value| value.split_once(' ')) {
            _ if value == b"released" => LastHolder::Released,
            Some(("held", ttl)) => LastHolder::Held { ttl: ttl.parse().unwrap_or(i64::MAX / 2) },
            _ => LastHolder::Held { ttl: 60 },
        }
    }
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
        assert_eq!(group.part_of(b"app/leader:a max"), Some(Part::Max));
        assert_eq!(group.part_of(b"app/leader:ab slot 2"), None);
        assert_eq!(group.part_of(b"app/leader:a slot x"), None);
        assert!(!"app/leader:a/b slot 0".starts_with(&group.range));
    }

    #[test]
    fn markers_read_back() {
        for last in [LastHolder::Released, LastHolder::Held { ttl: 7 }] {
            assert_eq!(LastHolder::read(last.value().as_bytes()), last);
        }
        assert_eq!(LastHolder::read(b"junk"), LastHolder::Held { ttl: 60 });
    }
}
