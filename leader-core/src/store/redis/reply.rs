//! The scripts' replies, turned into the store's outcomes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::Error;
use crate::store::answer::{Answer, Decode};
use crate::store::{
    AcquireOutcome, AcquireRequest, ClaimInfo, GroupSnapshot, Preference, ReleaseOutcome,
    RenewOutcome, SlotInfo,
};

fn malformed(operation: &'static str, reply: &Value) -> Error {
    decode(operation).unexpected(format_args!("{reply:?}"))
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

const fn decode(operation: &'static str) -> Decode {
    Decode { store: "redis", operation }
}

/// `{1, fence, acquired_ms, expires_ms, now_ms}`, `{0, nearest_expiry_in_ms}` or
/// `{2, existing_max_leaders}` (acquire.lua).
pub(super) fn acquire(reply: Value, request: AcquireRequest<'_>) -> Result<AcquireOutcome, Error> {
    let decode = decode("acquire");
    let Value::Array(items) = &reply else { return Err(malformed("acquire", &reply)) };
    let answer = match items.as_slice() {
        [Value::Int(1), fence, acquired, expires, now] => {
            let (Some(acquired), Some(expires), Some(now)) =
                (int(acquired), int(expires), int(now))
            else {
                return Err(malformed("acquire", &reply));
            };
            Answer {
                code: 1,
                fence: fence_of(fence),
                acquired_at: Some(at(acquired)),
                expires_at: Some(at(expires)),
                expires_in: Some(time_to_live(expires, now)),
                ..Answer::default()
            }
        }
        [Value::Int(0), Value::Int(nearest)] => {
            Answer { code: 0, expires_in: Some(span(*nearest)), ..Answer::default() }
        }
        [Value::Int(2), Value::Int(existing)] => {
            Answer { code: 2, existing_max: u32::try_from(*existing).ok(), ..Answer::default() }
        }
        _ => return Err(malformed("acquire", &reply)),
    };
    decode.acquire(answer, request)
}

/// `{1, expires_ms, now_ms}` or `{0}` (renew.lua).
pub(super) fn renew(reply: Value) -> Result<RenewOutcome, Error> {
    let answer = match *array("renew", &reply)?.as_slice() {
        [1, expires, now] => Answer {
            code: 1,
            expires_at: Some(at(expires)),
            expires_in: Some(time_to_live(expires, now)),
            ..Answer::default()
        },
        [code] => Answer { code, ..Answer::default() },
        _ => return Err(malformed("renew", &reply)),
    };
    decode("renew").renew(answer)
}

/// `{now_ms, expires_ms or 0 for each slot}` (renew_many.lua), for `count` slots.
pub(super) fn renew_many(reply: Value, count: usize) -> Result<Vec<RenewOutcome>, Error> {
    let numbers = array("renew_many", &reply)?;
    let Some((&now, expiries)) = numbers.split_first().filter(|(_, rest)| rest.len() == count)
    else {
        return Err(malformed("renew_many", &reply));
    };
    let renewal = |expires: i64| match expires {
        0 => Answer { code: 0, ..Answer::default() },
        _ => Answer {
            code: 1,
            expires_at: Some(at(expires)),
            expires_in: Some(time_to_live(expires, now)),
            ..Answer::default()
        },
    };
    expiries.iter().map(|&expires| decode("renew_many").renew(renewal(expires))).collect()
}

/// `{1}`, `{2, expires_in_ms}` or `{0}` (release.lua).
pub(super) fn release(reply: Value) -> Result<ReleaseOutcome, Error> {
    let answer = match *array("release", &reply)?.as_slice() {
        [code, expires_in] => {
            Answer { code, expires_in: Some(span(expires_in)), ..Answer::default() }
        }
        [code] => Answer { code, ..Answer::default() },
        _ => return Err(malformed("release", &reply)),
    };
    decode("release").release(answer)
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
    Ok(GroupSnapshot { max_leaders, leaders: slots, pending: Vec::new() })
}

/// `{state.lua's reply for each group}` (state_many.lua), for `count` groups.
pub(super) fn state_many(reply: Value, count: usize) -> Result<Vec<GroupSnapshot>, Error> {
    match reply {
        Value::Array(groups) if groups.len() == count => groups.into_iter().map(state).collect(),
        reply => Err(malformed("state_many", &reply)),
    }
}

pub(super) fn claim(reply: Value) -> Result<Option<ClaimInfo>, Error> {
    let Value::Array(items) = &reply else { return Err(malformed("claim", &reply)) };
    let [expires_in, waited, priority, Value::BulkString(holder), Value::BulkString(preferred)] =
        items.as_slice()
    else {
        return if items.is_empty() { Ok(None) } else { Err(malformed("claim", &reply)) };
    };
    let (Some(expires_in), Some(waited), Some(priority)) =
        (int(expires_in), int(waited), int(priority))
    else {
        return Err(malformed("claim", &reply));
    };
    let priority = i32::try_from(priority).map_err(|_| malformed("claim", &reply))?;
    let holder = String::from_utf8_lossy(holder).into_owned();
    let preferred =
        (!preferred.is_empty()).then(|| String::from_utf8_lossy(preferred).into_owned());
    let claim = ClaimInfo::new(holder, priority, span(waited), span(expires_in));
    Ok(Some(claim.with_preference(preferred)))
}

/// `{}` (none) or `{holder, expires_in_ms}` (preference.lua).
pub(super) fn preference(reply: Value) -> Result<Option<Preference>, Error> {
    let Value::Array(items) = &reply else { return Err(malformed("preference", &reply)) };
    match items.as_slice() {
        [] => Ok(None),
        [Value::BulkString(holder), expires_in] => {
            // A key without an expiry (PTTL -1), which this store never writes, reads as none.
            let expires_in = int(expires_in).filter(|ms| *ms > 0);
            let expires_in = expires_in.ok_or_else(|| malformed("preference", &reply))?;
            let holder = String::from_utf8_lossy(holder).into_owned();
            Ok(Some(Preference::new(holder, span(expires_in))))
        }
        _ => Err(malformed("preference", &reply)),
    }
}
