//! Reading the functions' rows: times and fences from microseconds, a renewal's answer, and
//! the error for a row that does not decode.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::tokio_postgres::{self, Row};

use crate::error::Error;
use crate::store::answer::{Answer, Decode};
use crate::store::{GroupSnapshot, RenewOutcome, SlotInfo};

/// A renewal's answer, from a row of the `renew` function.
pub(super) fn renewal(row: &Row) -> Result<RenewOutcome, Error> {
    let get = |column: &str| row.try_get::<_, Option<i64>>(column).map_err(|e| decode("renew", e));
    let outcome: i32 = row.try_get("outcome").map_err(|e| decode("renew", e))?;
    let (expires, now) = (get("expires_us")?, get("now_us")?);
    let answer = Answer {
        code: outcome.into(),
        expires_at: expires.map(time_of),
        expires_in: expires.zip(now).map(|(expires, now)| between(now, expires)),
        ..Answer::default()
    };
    Decode { store: "postgres", operation: "renew" }.renew(answer)
}

/// A live slot of a row of the `state` function, added to `snapshot`.
pub(super) fn add_slot(
    operation: &'static str,
    row: &Row,
    snapshot: &mut GroupSnapshot,
) -> Result<(), Error> {
    let get = |column: &str| row.try_get::<_, i64>(column).map_err(|e| decode(operation, e));
    let max: i32 = row.try_get("max_leaders").map_err(|e| decode(operation, e))?;
    let holder: String = row.try_get("holder").map_err(|e| decode(operation, e))?;
    snapshot.max_leaders = Some(max.max(0) as u32);
    snapshot.leaders.push(SlotInfo {
        holder,
        fence: fence_of(get("fence")?),
        acquired_at: time_of(get("acquired_us")?),
        expires_in: between(get("now_us")?, get("expires_us")?),
    });
    Ok(())
}

/// Microseconds since the Unix epoch, as the functions return times.
pub(super) fn time_of(micros: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(micros.max(0) as u64)
}

/// From `from` to `to`, in microseconds; zero if `to` is not later.
pub(super) fn between(from: i64, to: i64) -> Duration {
    Duration::from_micros(to.saturating_sub(from).max(0) as u64)
}

pub(super) fn millis(duration: Duration) -> i64 {
    i64::try_from(crate::duration::ceil_millis(duration)).unwrap_or(i64::MAX)
}

pub(super) fn fence_of(fence: i64) -> u64 {
    fence.max(0) as u64
}

pub(super) fn decode(operation: &'static str, error: tokio_postgres::Error) -> Error {
    unexpected(operation, &error.to_string())
}

pub(super) fn unexpected(operation: &'static str, what: &str) -> Error {
    Decode { store: "postgres", operation }.unexpected(what)
}
