//! Options of the per-call electors, and their validation.

use std::sync::Arc;
use std::time::Duration;

use crate::duration::within_limit;
use crate::error::Error;
use crate::holder;
use crate::key::KeyOptions;
use crate::timing::LeaseTiming;

/// Options of a [`LeaderElector`](crate::LeaderElector): one leader per name.
///
/// Setters never fail; the elector's constructor validates the whole set and names the first
/// value that is out of range.
///
/// The times are a [`LeaseTiming`](crate::LeaseTiming), as in every options type:
/// `renew_interval` is only for `auto_extend` (set without it, it is refused: nothing would
/// renew), and `retry_interval` is the longest pause between attempts while the store fails
/// when the macros' `on_store_error = "skip"` asks to try again.
///
/// ```
/// use std::time::Duration;
/// use leader_core::{LeaderElectionOptions, LeaderElector, MemoryStore};
///
/// let options = LeaderElectionOptions::new()
///     .wait_time(Duration::from_millis(500))
///     .lease_time(Duration::from_secs(10))
///     .min_lease_time(Duration::from_secs(60)); // longer than the lease: refused
/// let err = LeaderElector::new(MemoryStore::new(), options).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid `min_lease_time` 60s: must be at most lease_time (10s)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(remote = "Self", default, deny_unknown_fields)
)]
pub struct LeaderElectionOptions {
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::wait_time"
        )
    )]
    wait_time: Duration,
    #[cfg_attr(feature = "serde", serde(flatten, skip_deserializing))]
    timing: LeaseTiming,
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::min_lease_time"
        )
    )]
    min_lease_time: Duration,
    auto_extend: bool,
    fair_waiting: bool,
    priority: Option<i32>,
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::serde_support::field::holder_id")
    )]
    holder_id: Option<String>,
    keys: KeyOptions,
}

crate::serde_support::validated_serde!(
    LeaderElectionOptions,
    LeaderElectionOptions::validate,
    embeds timing
);

impl Default for LeaderElectionOptions {
    fn default() -> Self {
        LeaderElectionOptions {
            wait_time: Duration::ZERO,
            timing: LeaseTiming::default(),
            min_lease_time: Duration::ZERO,
            auto_extend: false,
            fair_waiting: true,
            priority: None,
            holder_id: None,
            keys: KeyOptions::default(),
        }
    }
}

impl LeaderElectionOptions {
    /// The defaults: one attempt, a 30 s lease, no minimum lease, no auto-extension.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks every option as [`LeaderElector::new`](crate::LeaderElector::new) does,
    /// touching no store; the error names the first value out of range.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_core::LeaderElectionOptions;
    ///
    /// let options = LeaderElectionOptions::new().renew_interval(Duration::from_secs(5));
    /// assert_eq!(
    ///     options.validate().unwrap_err().to_string(),
    ///     "invalid `renew_interval` 5s: only used with auto_extend, which is off"
    /// );
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        self.settings(1).map(drop)
    }

    /// Checks every option for groups of `max_leaders`, and returns the settings.
    pub(crate) fn settings(&self, max_leaders: u32) -> Result<Settings, Error> {
        let max_leaders = checked_max_leaders(max_leaders)?;
        let wait_time = within_limit("wait_time", self.wait_time)?;
        let times = self.timing.resolve(self.auto_extend)?;
        let lease_time = times.lease_time;
        let min_lease_time = within_limit("min_lease_time", self.min_lease_time)?;
        if min_lease_time > lease_time {
            return Err(Error::invalid_option(
                "min_lease_time",
                min_lease_time,
                format!("must be at most lease_time ({lease_time:?})"),
            ));
        }
        let renew_interval = match (self.auto_extend, times.renew_chosen) {
            (true, _) => Some(times.renew_interval),
            (false, false) => None,
            (false, true) => {
                return Err(Error::invalid_option(
                    "renew_interval",
                    times.renew_interval,
                    "only used with auto_extend, which is off",
                ));
            }
        };
        let holder_id = holder::chosen_or_default(self.holder_id.as_ref())?;
        self.keys.validate()?;
        Ok(Settings {
            max_leaders,
            wait_time,
            lease_time,
            min_lease_time,
            renew_interval,
            retry_interval: times.retry_interval,
            holder_id: holder_id.into(),
            keys: self.keys.clone(),
            skip_on_store_error: false,
            fair_waiting: self.fair_waiting,
            priority: self.priority,
        })
    }
}

/// Options of a [`LeaderGroupElector`](crate::LeaderGroupElector): up to `max_leaders`
/// holders per name. Every other option means what it does in [`LeaderElectionOptions`].
///
/// ```
/// use std::time::Duration;
/// use leader_core::LeaderGroupElectionOptions;
///
/// let options = LeaderGroupElectionOptions::new(3)
///     .wait_time(Duration::from_millis(500))
///     .lease_time(Duration::from_secs(10))
///     .auto_extend(true);
/// assert_eq!(options.max_leaders(), 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderGroupElectionOptions {
    max_leaders: u32,
    election: LeaderElectionOptions,
}

/// The configuration form of [`LeaderGroupElectionOptions`]: `max_leaders` beside the
/// election options' own fields, in one table. The fields stay listed once, on
/// [`LeaderElectionOptions`]: the group's table is read by taking `max_leaders` out of it and
/// handing the rest to the election options' derived `Deserialize`, which refuses unknown
/// fields. (serde's `flatten` would let unknown fields through.)
#[cfg(feature = "serde")]
mod group_config {
    use std::fmt;

    use serde::de::value::MapAccessDeserializer;
    use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{LeaderElectionOptions, LeaderGroupElectionOptions};
    use crate::timing::config::{Key, KeyOf};

    const MAX_LEADERS: &str = "max_leaders";

    impl<'de> Deserialize<'de> for LeaderGroupElectionOptions {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_map(GroupTable)
        }
    }

    struct GroupTable;

    impl<'de> Visitor<'de> for GroupTable {
        type Value = LeaderGroupElectionOptions;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of `max_leaders` and the leader election options")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            let mut max_leaders = None;
            let rest = WithoutMaxLeaders { map, max_leaders: &mut max_leaders };
            let election = crate::timing::config::deserialize::<LeaderElectionOptions, _>(
                MapAccessDeserializer::new(rest),
            )?;
            let max_leaders = max_leaders.ok_or_else(|| de::Error::missing_field(MAX_LEADERS))?;
            let options = LeaderGroupElectionOptions { max_leaders, election };
            options.validate().map_err(de::Error::custom)?;
            Ok(options)
        }
    }

    /// The group's table as the election options see it: `max_leaders` is taken out on the
    /// way.
    struct WithoutMaxLeaders<'a, A> {
        map: A,
        max_leaders: &'a mut Option<u32>,
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for WithoutMaxLeaders<'_, A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            let mut seed = Some(seed);
            loop {
                let key = KeyOf { taken: &[MAX_LEADERS], seed: &mut seed };
                let Some(key) = self.map.next_key_seed(key)? else { return Ok(None) };
                if let Key::Theirs(value) = key {
                    return Ok(Some(value));
                }
                if self.max_leaders.is_some() {
                    return Err(de::Error::duplicate_field(MAX_LEADERS));
                }
                // Checked here, so an error points at the key.
                let max_leaders =
                    self.map.next_value::<crate::serde_support::field::MaxLeaders>()?;
                *self.max_leaders = Some(max_leaders.0);
            }
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, A::Error> {
            self.map.next_value_seed(seed)
        }
    }

    impl Serialize for LeaderGroupElectionOptions {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            #[derive(Serialize)]
            struct GroupTable<'a> {
                max_leaders: u32,
                #[serde(flatten)]
                election: &'a LeaderElectionOptions,
            }
            GroupTable { max_leaders: self.max_leaders, election: &self.election }
                .serialize(serializer)
        }
    }
}

impl LeaderGroupElectionOptions {
    /// Defaults with `max_leaders` slots per group (at least 1, checked by the elector).
    pub fn new(max_leaders: u32) -> Self {
        LeaderGroupElectionOptions { max_leaders, election: LeaderElectionOptions::default() }
    }

    /// Group options with `max_leaders` slots and every other option taken from `election`.
    pub fn from_election(max_leaders: u32, election: LeaderElectionOptions) -> Self {
        LeaderGroupElectionOptions { max_leaders, election }
    }

    /// How many slots a group has.
    pub fn max_leaders(&self) -> u32 {
        self.max_leaders
    }

    /// These options with `holder_id` set from `default` when none was chosen.
    pub(crate) fn holder_id_or_else(self, default: impl FnOnce() -> &'static str) -> Self {
        self.map(|mut options| {
            options.holder_id.get_or_insert_with(|| default().to_owned());
            options
        })
    }

    fn map(self, f: impl FnOnce(LeaderElectionOptions) -> LeaderElectionOptions) -> Self {
        LeaderGroupElectionOptions { max_leaders: self.max_leaders, election: f(self.election) }
    }

    /// Checks every option as [`LeaderGroupElector::new`](crate::LeaderGroupElector::new)
    /// does, touching no store; the error names the first value out of range.
    pub fn validate(&self) -> Result<(), Error> {
        self.settings().map(drop)
    }

    pub(crate) fn settings(&self) -> Result<Settings, Error> {
        self.election.settings(self.max_leaders)
    }
}

/// The setters both electors' options share, written once with their docs: expanded on
/// [`LeaderElectionOptions`], which holds the fields (each named as its setter), and on
/// [`LeaderGroupElectionOptions`], which hands each value to the one it holds.
macro_rules! election_setters {
    ($($(#[$doc:meta])* fn $name:ident($value:ident: $ty:ty) => $field:expr;)*) => {
        impl LeaderElectionOptions {
            $(
                $(#[$doc])*
                pub fn $name(mut self, $value: $ty) -> Self {
                    self.$name = $field;
                    self
                }
            )*
        }

        impl LeaderGroupElectionOptions {
            $(
                $(#[$doc])*
                pub fn $name(self, $value: $ty) -> Self {
                    self.map(|options| options.$name($value))
                }
            )*
        }
    };
}

election_setters! {
    /// How long to wait for a free slot before returning `Skipped`. Default: zero, one attempt.
    ///
    /// Waiting is event driven: a release wakes the waiter at once, and a full group's
    /// nearest expiry sets its timer. There is no polling interval.
    fn wait_time(wait_time: Duration) => wait_time;

    /// Keep the slot at least this long after it was granted, even if the body finishes
    /// sooner (ShedLock's lock-at-least-for). The caller returns at once; the store keeps the
    /// slot. Default: zero. At most `lease_time`.
    fn min_lease_time(min_lease_time: Duration) => min_lease_time;

    /// Renew the slot while the body runs, every `renew_interval`; a group renews each of
    /// its slots alike. Default: false, so the loss signal fires when `lease_time` passes (a
    /// `run_if_leader` body still running then is logged as a warning, once per group).
    fn auto_extend(auto_extend: bool) => auto_extend;

    /// Wait in turn: a waiter that lost 3 hand-overs in a row claims the group's next free
    /// slot, and of the waiters that claim it the one that has waited longest is served
    /// first. A waiter holding the claim attempts again every 500 ms (half the claim's life,
    /// at most half the lease) while it waits, and the claim of a waiter that stopped or
    /// died holds a free slot back for at most 1 s (on etcd, for at most its claim lease's
    /// TTL: 1 s, and at least the cluster's shortest lease). Default: true.
    fn fair_waiting(fair_waiting: bool) => fair_waiting;

    /// Wait with `priority` (higher wins): every attempt claims the group's next free slot
    /// at that priority, from the first on, so of the waiters that claim it the one of the
    /// highest priority (then the longest waiting) is served first, and the holder an
    /// operator [prefers](crate::LeaderGroupElector::prefer) before them all. A per-call
    /// holder is never asked to step down: a better candidate waits for its slot. Stores
    /// that keep no claims ignore it. Default: none (fair waiting alone).
    fn priority(priority: i32) => Some(priority);

    /// This candidate's id in state and logs. Default: `hostname:pid:random`.
    /// 1 to 256 bytes, no control characters.
    fn holder_id(holder_id: impl Into<String>) => Some(holder_id.into());

    /// How names become store keys. Default: `leader:{role}`, no namespace.
    fn keys(keys: KeyOptions) => keys;
}

crate::timing::timing_setters!(LeaderElectionOptions);
crate::timing::timing_setters!(LeaderGroupElectionOptions, |options, set| {
    options.map(|election| election.with_timing(set))
});

/// Options after validation, as the electors use them.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub max_leaders: std::num::NonZeroU32,
    pub wait_time: Duration,
    pub lease_time: Duration,
    pub min_lease_time: Duration,
    /// The renewal cadence, when `auto_extend` is on.
    pub renew_interval: Option<Duration>,
    /// The longest pause between attempts while the store fails (`on_store_error = "skip"`).
    pub retry_interval: Duration,
    pub holder_id: Arc<str>,
    pub keys: KeyOptions,
    /// The macros' `on_store_error = "skip"`: store failures are tried again until
    /// `wait_time` is over, then the call is `Skipped`.
    pub skip_on_store_error: bool,
    /// Waiters take turns (see `fair_waiting`).
    pub fair_waiting: bool,
    /// The priority every attempt claims at (see `priority`).
    pub priority: Option<i32>,
}

/// `max_leaders` as a group's size: at least 1 (both option families check it here).
pub(crate) fn checked_max_leaders(max_leaders: u32) -> Result<std::num::NonZeroU32, Error> {
    std::num::NonZeroU32::new(max_leaders).ok_or_else(|| {
        Error::invalid_option(
            "max_leaders",
            max_leaders,
            "must be at least 1 (1 is a single leader)",
        )
    })
}

#[cfg(test)]
mod tests;
