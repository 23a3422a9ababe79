//! [`LeadershipOptions`]: timings, keys and behaviour of long-lived leadership.

use std::sync::Arc;
use std::time::Duration;

use crate::duration::{positive, within_limit};
use crate::election::options::checked_max_leaders;
use crate::error::Error;
use crate::holder;
use crate::key::KeyOptions;
use crate::timing::LeaseTiming;

/// What a leadership does over a store that does not coordinate (a
/// [`DisabledStore`](crate::DisabledStore)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "snake_case")
)]
pub enum WhenUncoordinated {
    /// Never lead, so replicas that share a non-coordinating store cannot all lead.
    #[default]
    Follow,
    /// Lead without coordination: for a single instance or local development.
    Lead,
}

/// Options of a [`Leadership`](crate::Leadership), checked by `Leadership::start` (and by a
/// registry before it starts any role). Setters never fail; [`validate`](Self::validate)
/// and the constructors name the first value that is out of range.
///
/// The times are a [`LeaseTiming`](crate::LeaseTiming), as in every options type: the
/// lease of a term, its renewal, and `retry_interval`, the longest pause of a candidate's
/// backoff after a store failure, which is also the most a resigned leader waits before
/// standing again (100 ms unless this is shorter).
///
/// ```
/// use std::time::Duration;
/// use leader_core::{LeadershipOptions, MemoryStore};
///
/// let options = LeadershipOptions::new()
///     .lease_time(Duration::from_secs(10))
///     .renew_interval(Duration::from_secs(6)); // more than lease_time / 2
/// let err = options.validate().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid `renew_interval` 6s: must be between 1ms and lease_time / 2 (5s) so renewals \
///      beat the lease"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(remote = "Self", default, deny_unknown_fields)
)]
pub struct LeadershipOptions {
    #[cfg_attr(feature = "serde", serde(flatten, skip_deserializing))]
    timing: LeaseTiming,
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::retry_jitter"
        )
    )]
    retry_jitter: Option<Duration>,
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::serde_support::field::max_leaders")
    )]
    max_leaders: u32,
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::serde_support::field::holder_id")
    )]
    holder_id: Option<String>,
    keys: KeyOptions,
    when_uncoordinated: WhenUncoordinated,
    fair_waiting: bool,
    priority: Option<i32>,
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::step_down_delay"
        )
    )]
    step_down_delay: Duration,
}

crate::serde_support::validated_serde!(LeadershipOptions, LeadershipOptions::validate, embeds timing);

impl Default for LeadershipOptions {
    fn default() -> Self {
        LeadershipOptions {
            timing: LeaseTiming::default(),
            retry_jitter: None,
            max_leaders: 1,
            holder_id: None,
            keys: KeyOptions::default(),
            when_uncoordinated: WhenUncoordinated::Follow,
            fair_waiting: false,
            priority: None,
            step_down_delay: DEFAULT_STEP_DOWN_DELAY,
        }
    }
}

impl LeadershipOptions {
    /// The defaults: a 30 s lease renewed every 10 s, failures retried after at most 1 s
    /// (plus up to 250 ms of jitter), one leader, key `leader:{role}`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most random delay added to each retry, so candidates do not retry in step.
    /// Default: `retry_interval / 4`. At most `retry_interval`.
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.retry_jitter = Some(jitter);
        self
    }

    /// Hold one of `max_leaders` slots: N active members, the rest standbys that take over
    /// when a member leaves or dies. Default: 1, a single leader.
    pub fn max_leaders(mut self, max_leaders: u32) -> Self {
        self.max_leaders = max_leaders;
        self
    }

    /// This instance's id in state and logs. Default: `hostname:pid:random`.
    pub fn holder_id(mut self, holder_id: impl Into<String>) -> Self {
        self.holder_id = Some(holder_id.into());
        self
    }

    /// How the role becomes a store key. Default: `leader:{role}`.
    pub fn keys(mut self, keys: KeyOptions) -> Self {
        self.keys = keys;
        self
    }

    /// What to do over a store that does not coordinate. Default: [`WhenUncoordinated::Follow`].
    pub fn when_uncoordinated(mut self, behaviour: WhenUncoordinated) -> Self {
        self.when_uncoordinated = behaviour;
        self
    }

    /// Wait in turn, as the electors' `fair_waiting` does: a standby that lost 3 hand-overs
    /// of the role in a row claims its next free slot, and of the standbys that claim it the
    /// one that has waited longest takes it. While it holds the claim, that standby asks the
    /// store every 500 ms (half the claim's life, at most half the lease) until it leads, so
    /// a role whose leader rarely changes pays one request every 500 ms per role. Default:
    /// false.
    pub fn fair_waiting(mut self, fair_waiting: bool) -> Self {
        self.fair_waiting = fair_waiting;
        self
    }

    /// Stand with `priority` (higher wins), and lead only while no better candidate waits:
    /// - while it waits, this instance announces itself in the group's claim on its next
    ///   free slot, asking the store every 500 ms (half the claim's life, at most half the
    ///   lease), so the announcement of a candidate that died lapses within a second; the
    ///   claim goes to the best waiting candidate (the highest priority, then the earliest
    ///   arrival), and keeps the next free slot for it;
    /// - while it leads, it reads the group's claim twice per
    ///   [`step_down_delay`](Self::step_down_delay) (at least once per `renew_interval`); once a
    ///   candidate of a strictly higher priority has been waiting that long, it steps down
    ///   as [`resign`](crate::Leadership::resign) does (the term's token is cancelled and
    ///   `fence()` is `None` from then, and the slot is released at once: the work must stop
    ///   on the token) and stands again, and the claim keeps the slot for that candidate.
    ///   Equal priorities never preempt one another.
    ///
    /// Give every candidate of a role a priority: one without stands at none, never reads the
    /// claim, and is never asked to step down. Stores that keep no claims (see
    /// [`LeaseStore::keeps_reservations`](crate::LeaseStore::keeps_reservations)) ignore it.
    /// Default: none.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_core::LeadershipOptions;
    ///
    /// // The instance in the region nearest the data leads whenever it is up.
    /// let options = LeadershipOptions::new().priority(10).step_down_delay(Duration::from_secs(2));
    /// # options.validate().unwrap();
    /// ```
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// How long a candidate of a higher [`priority`](Self::priority) must have been seen
    /// waiting before the leader steps down for it: the hysteresis that keeps a candidate
    /// that comes and goes from moving the role back and forth; the leader reads the claim
    /// twice per delay (at least once per `renew_interval`), and steps down only if the
    /// candidate kept its claim alive between the first read that saw it and the last.
    /// Default: 2 s; at least 1 ms.
    pub fn step_down_delay(mut self, delay: Duration) -> Self {
        self.step_down_delay = delay;
        self
    }

    /// Checks every option (the key options too) as `Leadership::start` does, touching no
    /// store; the error names the first value out of range. A role's name and resolved key
    /// are checked when it starts, or for many roles at once by
    /// [`LeadershipRegistry::validate`](crate::LeadershipRegistry::validate).
    pub fn validate(&self) -> Result<(), Error> {
        self.keys.validate()?;
        self.checked_with_key(String::new()).map(drop)
    }

    /// Checks every option and resolves the key of `role`.
    pub(crate) fn settings(&self, role: &str) -> Result<LeadershipSettings, Error> {
        let key = self.keys.resolve(role)?;
        let mut settings = self.checked_with_key(key)?;
        settings.role = role.to_owned();
        Ok(settings)
    }

    fn checked_with_key(&self, key: String) -> Result<LeadershipSettings, Error> {
        let times = self.timing.resolve(true)?;
        let retry_interval = times.retry_interval;
        let retry_jitter =
            within_limit("retry_jitter", self.retry_jitter.unwrap_or(retry_interval / 4))?;
        if retry_jitter > retry_interval {
            return Err(Error::invalid_option(
                "retry_jitter",
                retry_jitter,
                format!("must be at most retry_interval ({retry_interval:?})"),
            ));
        }
        let max_leaders = checked_max_leaders(self.max_leaders)?;
        let holder_id = holder::chosen_or_default(self.holder_id.as_ref())?;
        let step_down_delay =
            within_limit("step_down_delay", positive("step_down_delay", self.step_down_delay)?)?;
        Ok(LeadershipSettings {
            role: String::new(),
            key,
            lease_time: times.lease_time,
            renew_interval: times.renew_interval,
            retry_interval,
            retry_jitter,
            max_leaders,
            holder_id: holder_id.into(),
            when_uncoordinated: self.when_uncoordinated,
            fair_waiting: self.fair_waiting,
            priority: self.priority,
            step_down_delay,
        })
    }
}

crate::timing::timing_setters!(LeadershipOptions);

/// How long a better candidate waits before the leader steps down for it, by default.
const DEFAULT_STEP_DOWN_DELAY: Duration = Duration::from_secs(2);

/// Options after validation, with the role's resolved key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeadershipSettings {
    /// The role.
    pub role: String,
    /// The role's resolved store key.
    pub key: String,
    /// The lease of a term.
    pub lease_time: Duration,
    /// The renewal cadence.
    pub renew_interval: Duration,
    /// The candidates' retry cadence.
    pub retry_interval: Duration,
    /// The most jitter added to a retry.
    pub retry_jitter: Duration,
    /// Slots of the role's group.
    pub max_leaders: std::num::NonZeroU32,
    /// This instance's id.
    pub holder_id: Arc<str>,
    /// Behaviour over a store that does not coordinate.
    pub when_uncoordinated: WhenUncoordinated,
    /// Standbys take turns (see `fair_waiting`).
    pub fair_waiting: bool,
    /// The priority this instance stands with, if any (see `priority`).
    pub priority: Option<i32>,
    /// How long a better candidate waits before the leader steps down for it.
    pub step_down_delay: Duration,
}

impl LeadershipSettings {
    /// `retry_interval` plus a random share of `retry_jitter`.
    pub(crate) fn retry_delay(&self) -> Duration {
        self.retry_interval + self.retry_jitter.mul_f64(random_share())
    }

    /// The pause after a store failure: `pause` (from the loop's backoff, 50 ms doubling up
    /// to `retry_interval`) plus a random share of `retry_jitter`, scaled down with the
    /// pause, so instances that failed together do not retry together.
    pub(crate) fn failure_delay(&self, pause: Duration) -> Duration {
        let scale = pause.as_secs_f64() / self.retry_interval.as_secs_f64().max(f64::EPSILON);
        pause + self.retry_jitter.mul_f64(random_share() * scale.min(1.0))
    }
}

/// A random number in [0, 1].
fn random_share() -> f64 {
    crate::random::unit(0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let settings = LeadershipOptions::new().settings("scheduler").unwrap();
        assert_eq!(settings.key, "leader:scheduler");
        assert_eq!(settings.lease_time, crate::DEFAULT_LEASE_TIME);
        assert_eq!(settings.renew_interval, Duration::from_secs(10));
        assert_eq!(settings.retry_jitter, Duration::from_millis(250));
        let delay = settings.retry_delay();
        assert!(
            delay >= Duration::from_secs(1) && delay <= Duration::from_millis(1_250),
            "{delay:?}"
        );
    }

    #[test]
    fn refuses_bad_values() {
        let cases = [
            (LeadershipOptions::new().lease_time(Duration::ZERO), "invalid `lease_time` 0ns"),
            (
                LeadershipOptions::new().renew_interval(Duration::ZERO),
                "invalid `renew_interval` 0ns",
            ),
            (
                LeadershipOptions::new().retry_interval(Duration::ZERO),
                "invalid `retry_interval` 0ns: must be at least 1ms",
            ),
            (
                LeadershipOptions::new().retry_jitter(Duration::from_secs(2)),
                "invalid `retry_jitter` 2s: must be at most retry_interval (1s)",
            ),
            (LeadershipOptions::new().max_leaders(0), "invalid `max_leaders` 0"),
            (LeadershipOptions::new().holder_id(""), "invalid `holder_id`"),
            (LeadershipOptions::new().lease_time(Duration::MAX), "invalid `lease_time`"),
        ];
        for (options, expected) in cases {
            let err = options.validate().unwrap_err().to_string();
            assert!(err.starts_with(expected), "{err:?} does not start with {expected:?}");
        }
        assert!(matches!(
            LeadershipOptions::new().settings("two words"),
            Err(Error::InvalidName { .. })
        ));
    }
}
