//! The outcome codes the Redis scripts and the PostgreSQL functions answer with, turned
//! into the store's outcomes here, once: a store reads its reply into an [`Answer`] (its
//! fields already in times and durations), and these functions say what the code means.
//!
//! | operation | 1 | 0 | 2 |
//! |---|---|---|---|
//! | acquire | granted (or already held by the token) | full (`expires_in`: the nearest expiry) | live slots under another `max_leaders` (`existing_max`) |
//! | renew | renewed | not held | |
//! | release | released | not held | kept until the minimum lease (`expires_in`) |

use std::time::{Duration, SystemTime};

use crate::error::Error;
use crate::store::{AcquireOutcome, AcquireRequest, Grant, ReleaseOutcome, RenewOutcome};

/// One operation's answer: its outcome code and whichever fields the code comes with.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    pub code: i64,
    pub fence: Option<u64>,
    pub acquired_at: Option<SystemTime>,
    pub expires_at: Option<SystemTime>,
    /// Time to live from the moment the store acted, rounded down; for a refusal, until
    /// the nearest expiry; for a kept release, until the slot expires.
    pub expires_in: Option<Duration>,
    pub existing_max: Option<u32>,
}

/// Decodes answers of one store's `operation`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decode {
    pub store: &'static str,
    pub operation: &'static str,
}

impl Decode {
    /// An answer that does not follow the table above.
    pub(crate) fn unexpected(self, what: impl std::fmt::Display) -> Error {
        Error::Store {
            store: self.store,
            endpoint: String::new(),
            operation: self.operation,
            message: format!(
                "unexpected reply: {what}; is another version of leader's scripts or functions \
                 installed?"
            ),
        }
    }

    fn field<T>(self, value: Option<T>, name: &str) -> Result<T, Error> {
        value.ok_or_else(|| self.unexpected(format_args!("no {name}")))
    }

    /// An acquire's answer.
    pub(crate) fn acquire(
        self,
        answer: Answer,
        request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome, Error> {
        match answer.code {
            1 => Ok(AcquireOutcome::Granted(Grant {
                fence: self.field(answer.fence, "fence")?,
                acquired_at: self.field(answer.acquired_at, "grant time")?,
                expires_at: self.field(answer.expires_at, "expiry")?,
                expires_in: self.field(answer.expires_in, "time to live")?,
            })),
            0 => Ok(AcquireOutcome::Full {
                nearest_expiry: self.field(answer.expires_in, "nearest expiry")?,
            }),
            2 => Err(Error::MaxLeadersMismatch {
                group: request.key.to_owned(),
                requested: request.max_leaders.get(),
                existing: self.field(answer.existing_max, "existing max_leaders")?,
            }),
            code => Err(self.unexpected(format_args!("outcome {code}"))),
        }
    }

    /// A renewal's answer.
    pub(crate) fn renew(self, answer: Answer) -> Result<RenewOutcome, Error> {
        match answer.code {
            1 => Ok(RenewOutcome::Renewed {
                expires_at: self.field(answer.expires_at, "expiry")?,
                expires_in: self.field(answer.expires_in, "time to live")?,
            }),
            0 => Ok(RenewOutcome::NotHeld),
            code => Err(self.unexpected(format_args!("outcome {code}"))),
        }
    }

    /// A release's answer.
    pub(crate) fn release(self, answer: Answer) -> Result<ReleaseOutcome, Error> {
        match answer.code {
            1 => Ok(ReleaseOutcome::Released),
            2 => Ok(ReleaseOutcome::Kept {
                expires_in: self.field(answer.expires_in, "time to live")?,
            }),
            0 => Ok(ReleaseOutcome::NotHeld),
            code => Err(self.unexpected(format_args!("outcome {code}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_mean_the_same_for_every_store() {
        let decode = Decode { store: "redis", operation: "release" };
        let kept =
            Answer { code: 2, expires_in: Some(Duration::from_secs(3)), ..Answer::default() };
        assert_eq!(
            decode.release(kept).unwrap(),
            ReleaseOutcome::Kept { expires_in: Duration::from_secs(3) }
        );
        let err = decode.release(Answer { code: 7, ..Answer::default() }).unwrap_err();
        assert!(err.to_string().contains("unexpected reply: outcome 7"), "{err}");
        let err = decode.renew(Answer { code: 1, ..Answer::default() }).unwrap_err();
        assert!(err.to_string().contains("no expiry"), "{err}");
    }
}
