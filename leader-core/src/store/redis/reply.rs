//! The scripts' replies, turned into the store's outcomes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::Error;
use crate::store::{
    AcquireOutcome, AcquireRequest, Grant, GroupSnapshot, ReleaseOutcome, RenewOutcome, SlotInfo,
};

fn malformed(operation: &'static str, reply: &Value) -> Error {
    Error::Store {
        store: "redis",
        operation,
        message: format!(
            "unexpected script reply {reply:?}; is another version of leader's scripts loaded?"
        ),
    }
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// A fence: its decimal digits (the scripts never turn one into a Lua number, exact only up
/// to 2^53).
fn fence_of(value: &Value) -> Option<u64> {
    match value {
        Value::BulkString(digits) => std::str::from_utf8(digits).ok()?.parse().ok(),
        _ => None,
    }
}

fn array(operation: &'static str, reply: &Value) -> Result<Vec<i64>, Error> {
    let Value::Array(items) = reply else {
        return Err(malformed(operation, reply));
    };
    items.iter().map(|item| int(item).ok_or_else(|| malformed(operation, reply))).collect()
}

fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

fn span(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// How long a slot expiring at `expires` (server ms) lives at least from the moment the
/// script ran, whose clock it read as `now`. The scripts floor the server's microsecond
/// clock to whole milliseconds, so the script ran up to 1 ms after `now`: counting that
/// millisecond off keeps a local deadline, counted from before the request was sent, from
/// ever falling after the store's expiry.
fn time_to_live(expires: i64, now: i64) -> Duration {
    span(expires - now - 1)
}

pub(super) fn acquire(reply: Value, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
    if let Value::Array(items) = &reply
        && let [Value::Int(1), granted, rest @ ..] = items.as_slice()
    {
        let times: Option<Vec<i64>> = rest.iter().map(int).collect();
        return match (fence_of(granted), times.as_deref()) {
            (Some(fence), Some(&[acquired, expires, now])) => Ok(AcquireOutcome::Granted(Grant {
                fence,
                acquired_at: at(acquired),
                expires_at: at(expires),
                expires_in: time_to_live(expires, now),
            })),
            _ => Err(malformed("acquire", &reply)),
        };
    }
    match *array("acquire", &reply)?.as_slice() {
        [0, nearest] => Ok(AcquireOutcome::Full { nearest_expiry: span(nearest) }),
        [2, existing] => Err(Error::MaxLeadersMismatch {
            group: request.key.to_owned(),
            requested: request.max_leaders,
            existing: existing as u32,
        }),
        _ => Err(malformed("acquire", &reply)),
    }
}

pub(super) fn renew(reply: Value) -> Result<RenewOutcome, Error> {
    match *array("renew", &reply)?.as_slice() {
        [1, expires, now] => Ok(RenewOutcome::Renewed {
            expires_at: at(expires),
            expires_in: time_to_live(expires, now),
        }),
        [0] => Ok(RenewOutcome::NotHeld),
        _ => Err(malformed("renew", &reply)),
    }
}

pub(super) fn release(reply: Value) -> Result<ReleaseOutcome, Error> {
    match *array("release", &reply)?.as_slice() {
        [1] => Ok(ReleaseOutcome::Released),
        [2, expires_in] => Ok(ReleaseOutcome::Kept { expires_in: span(expires_in) }),
        [0] => Ok(ReleaseOutcome::NotHeld),
        _ => Err(malformed("release", &reply)),
    }
}

pub(super) fn state(reply: Value) -> Result<GroupSnapshot, Error> {
    let Value::Array(items) = &reply else {
        return Err(malformed("state", &reply));
    };
    let (Some(now), Some(max)) = (items.first().and_then(int), items.get(1).and_then(int)) else {
        return Err(malformed("state", &reply));
    };
    let mut slots = Vec::with_capacity(items.len().saturating_sub(2) / 4);
    for slot in items[2..].chunks(4) {
        let [fence, acquired, expires, Value::BulkString(holder)] = slot else {
            return Err(malformed("state", &reply));
        };
        let (Some(fence), Some(acquired), Some(expires)) =
            (fence_of(fence), int(acquired), int(expires))
        else {
            return Err(malformed("state", &reply));
        };
        slots.push(SlotInfo {
            holder: String::from_utf8_lossy(holder).into_owned(),
            fence,
            acquired_at: at(acquired),
            expires_in: span(expires - now),
        });
    }
    slots.sort_by_key(|slot| slot.fence);
    let max_leaders = (!slots.is_empty() && max > 0).then_some(max as u32);
    Ok(GroupSnapshot { max_leaders, slots })
}
