//! [`LeaseTiming`]: the lease, renewal and retry times every options family embeds (the
//! electors', `LeadershipOptions`, `PartitionOptions`), with one default and one check per
//! setting.

use std::time::Duration;

use crate::duration::{positive, renew_interval};
use crate::error::Error;

/// Default [`LeaseTiming::lease_time`]: 30 seconds.
pub const DEFAULT_LEASE_TIME: Duration = Duration::from_secs(30);

/// The longest default [`retry_interval`](LeaseTiming::retry_interval): 1 second.
pub const DEFAULT_RETRY_CEILING: Duration = Duration::from_secs(1);

/// How long a slot lives, how often its holder renews it and how long a candidate pauses at
/// most after a store failure: the times every options type shares (as deadpool's
/// `Timeouts` is shared by every pool), set through this type or through each options
/// type's setters of the same names. Setters never fail; [`validate`](Self::validate) and
/// the options that embed it name the first value out of range.
///
/// In configuration (feature `serde`) its keys sit in the options' own table:
/// `lease_time = "10s"` beside `holder_id`, not in a table of their own.
///
/// ```
/// use std::time::Duration;
/// use leader_core::{LeaseTiming, LeadershipOptions, PartitionOptions};
///
/// // One set of times for a role and a partition set of one service.
/// let timing = LeaseTiming::new()
///     .lease_time(Duration::from_secs(10))
///     .renew_interval(Duration::from_secs(2));
/// let leadership = LeadershipOptions::new().timing(timing.clone());
/// let partitions = PartitionOptions::new().timing(timing);
/// assert!(leadership.validate().is_ok() && partitions.validate().is_ok());
///
/// let slow = LeaseTiming::new()
///     .lease_time(Duration::from_secs(10))
///     .renew_interval(Duration::from_secs(6));
/// assert_eq!(
///     slow.validate().unwrap_err().to_string(),
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
pub struct LeaseTiming {
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::lease_time"
        )
    )]
    lease_time: Duration,
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::renew_interval"
        )
    )]
    renew_interval: Option<Duration>,
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::retry_interval"
        )
    )]
    retry_interval: Option<Duration>,
}

crate::serde_support::validated_serde!(LeaseTiming, LeaseTiming::validate);

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming { lease_time: DEFAULT_LEASE_TIME, renew_interval: None, retry_interval: None }
    }
}

impl LeaseTiming {
    /// The defaults: a 30 s lease, renewed every `lease_time / 3`, failures retried after at
    /// most the smaller of `renew_interval / 4` and 1 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// A slot's time to live on the store's clock: a crashed holder's slot is free again
    /// after at most this long. Default: 30 s. At least 1 ms, and 3 ms where it is renewed
    /// at the default cadence (`lease_time / 3`, at least 1 ms).
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = lease_time;
        self
    }

    /// How often a holder renews. Default: `lease_time / 3`. Between 1 ms and
    /// `lease_time / 2`, so a failed renewal can be retried before the lease ends.
    pub fn renew_interval(mut self, renew_interval: Duration) -> Self {
        self.renew_interval = Some(renew_interval);
        self
    }

    /// The longest pause after a store failure: a candidate's attempts and a partitions
    /// node's claims back off from 50 ms (or this, if shorter), doubling up to it; a failed
    /// renewal or read of a partitions node is tried again after it, or at the next renewal
    /// if that comes sooner. A candidate facing a full group does not poll: a release wakes
    /// it, or the nearest expiry. Default: the smaller of `renew_interval / 4` and 1 s. At
    /// least 1 ms.
    pub fn retry_interval(mut self, retry_interval: Duration) -> Self {
        self.retry_interval = Some(retry_interval);
        self
    }

    /// Checks the three times alone (a renewal cadence is checked if one is set); each
    /// options type checks them again with what it knows (whether it renews at all).
    pub fn validate(&self) -> Result<(), Error> {
        self.resolve(self.renew_interval.is_some()).map(drop)
    }

    /// The times checked and their defaults filled in, for a holder that renews (`renews`:
    /// the lease must allow the default cadence) or not.
    pub(crate) fn resolve(&self, renews: bool) -> Result<Times, Error> {
        let lease_time = positive("lease_time", self.lease_time)?;
        let cadence = match (renews, self.renew_interval) {
            (false, None) => (lease_time / 3).max(Duration::from_millis(1)),
            (_, chosen) => renew_interval(lease_time, chosen)?,
        };
        let retry_interval = match self.retry_interval {
            None => (cadence / 4).clamp(Duration::from_millis(1), DEFAULT_RETRY_CEILING),
            Some(every) => positive("retry_interval", every)?,
        };
        Ok(Times {
            lease_time,
            renew_interval: cadence,
            renew_chosen: self.renew_interval.is_some(),
            retry_interval,
        })
    }
}

/// The setters of [`LeaseTiming`]'s times on an options type that embeds one (in a field
/// `timing`, or through `map` for a type that holds other options), written once with
/// their docs.
macro_rules! timing_setters {
    ($type:ty) => {
        $crate::timing::timing_setters!($type, |options, set| {
            let mut options = options;
            options.timing = set(std::mem::take(&mut options.timing));
            options
        });
    };
    ($type:ty, |$options:ident, $set:ident| $apply:expr) => {
        impl $type {
            /// A slot's time to live on the store's clock: a crashed holder's slot is free
            /// again after at most this long. Default: 30 s. At least 1 ms, and 3 ms where
            /// it is renewed at the default cadence (`lease_time / 3`). See
            /// [`LeaseTiming::lease_time`](crate::LeaseTiming::lease_time).
            pub fn lease_time(self, lease_time: std::time::Duration) -> Self {
                self.with_timing(|timing| timing.lease_time(lease_time))
            }

            /// How often a holder renews. Default: `lease_time / 3`. Between 1 ms and
            /// `lease_time / 2`, so a failed renewal can be retried before the lease ends.
            /// See [`LeaseTiming::renew_interval`](crate::LeaseTiming::renew_interval).
            pub fn renew_interval(self, renew_interval: std::time::Duration) -> Self {
                self.with_timing(|timing| timing.renew_interval(renew_interval))
            }

            /// The longest pause after a store failure (from 50 ms, doubling). Default: the
            /// smaller of `renew_interval / 4` and 1 s. At least 1 ms. See
            /// [`LeaseTiming::retry_interval`](crate::LeaseTiming::retry_interval).
            pub fn retry_interval(self, retry_interval: std::time::Duration) -> Self {
                self.with_timing(|timing| timing.retry_interval(retry_interval))
            }

            /// The lease, renewal and retry times at once, as every options type takes
            /// them.
            pub fn timing(self, timing: $crate::LeaseTiming) -> Self {
                self.with_timing(|_| timing)
            }

            fn with_timing(
                self,
                $set: impl FnOnce($crate::LeaseTiming) -> $crate::LeaseTiming,
            ) -> Self {
                let $options = self;
                $apply
            }
        }
    };
}

pub(crate) use timing_setters;

/// How an options type's table holds a [`LeaseTiming`]: its keys beside the type's own,
/// each read (and checked) where it stands, so an error points at its key.
#[cfg(feature = "serde")]
pub(crate) mod config {
    use std::fmt;
    use std::marker::PhantomData;
    use std::time::Duration;

    use serde::de::value::{MapAccessDeserializer, StrDeserializer};
    use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer};

    use super::LeaseTiming;
    use crate::serde_support::field;

    /// An options type whose derived `Deserialize` skips its `timing` field.
    pub(crate) trait EmbedsTiming: Sized {
        /// The derived (remote) deserialization of every other field.
        fn derived<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
        /// Sets the timing read beside them.
        fn set_timing(&mut self, timing: LeaseTiming);
    }

    /// Reads `T` from a table of its own keys and [`LeaseTiming`]'s.
    pub(crate) fn deserialize<'de, T: EmbedsTiming, D: Deserializer<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        d.deserialize_map(Table(PhantomData))
    }

    struct Table<T>(PhantomData<T>);

    impl<'de, T: EmbedsTiming> Visitor<'de> for Table<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of options")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            let mut timing = LeaseTiming::default();
            let mut seen = [false; 3];
            let rest = TimingTaken { map, timing: &mut timing, seen: &mut seen };
            let mut options = T::derived(MapAccessDeserializer::new(rest))?;
            options.set_timing(timing);
            Ok(options)
        }
    }

    /// The table as the derive sees it: the timing's keys are taken out on the way.
    struct TimingTaken<'a, A> {
        map: A,
        timing: &'a mut LeaseTiming,
        seen: &'a mut [bool; 3],
    }

    const KEYS: [&str; 3] = ["lease_time", "renew_interval", "retry_interval"];

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for TimingTaken<'_, A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            let mut seed = Some(seed);
            loop {
                let key = KeyOf { taken: &KEYS, seed: &mut seed };
                let Some(key) = self.map.next_key_seed(key)? else { return Ok(None) };
                let index = match key {
                    Key::Theirs(value) => return Ok(Some(value)),
                    Key::Taken(index) => index,
                };
                if std::mem::replace(&mut self.seen[index], true) {
                    return Err(de::Error::duplicate_field(KEYS[index]));
                }
                let timing = std::mem::take(self.timing);
                *self.timing = match index {
                    0 => timing.lease_time(self.map.next_value::<LeaseTime>()?.0),
                    1 => match self.map.next_value::<RenewInterval>()?.0 {
                        Some(every) => timing.renew_interval(every),
                        None => timing,
                    },
                    _ => match self.map.next_value::<RetryInterval>()?.0 {
                        Some(every) => timing.retry_interval(every),
                        None => timing,
                    },
                };
            }
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, A::Error> {
            self.map.next_value_seed(seed)
        }
    }

    /// A key of a table read by a wrapper that takes some keys out: one of those (by its
    /// index among them), or one for the derive.
    pub(crate) enum Key<T> {
        Taken(usize),
        Theirs(T),
    }

    /// Reads a key, and hands it to the derive's seed unless it is one of `taken`. The key
    /// reaches the seed inside the table's own call, so an error (an unknown key) carries
    /// the key's place.
    pub(crate) struct KeyOf<'a, K> {
        pub taken: &'static [&'static str],
        pub seed: &'a mut Option<K>,
    }

    impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeyOf<'_, K> {
        type Value = Key<K::Value>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for KeyOf<'_, K> {
        type Value = Key<K::Value>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an option's name")
        }

        fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
            if let Some(index) = self.taken.iter().position(|name| *name == key) {
                return Ok(Key::Taken(index));
            }
            let seed = self.seed.take().expect("a key is handed on once");
            match seed.deserialize(StrDeserializer::<KeyError>::new(key)) {
                Ok(value) => Ok(Key::Theirs(value)),
                // The derive knows only its own keys: the ones taken out here are allowed too.
                Err(KeyError::Unknown { key, expected }) => {
                    Err(E::unknown_field(&key, with_taken(expected, self.taken)))
                }
                Err(KeyError::Other(message)) => Err(E::custom(message)),
            }
        }
    }

    /// An error of the derive's key, kept apart so that an unknown key's list of what is
    /// expected can be completed.
    #[derive(Debug)]
    enum KeyError {
        Unknown { key: String, expected: &'static [&'static str] },
        Other(String),
    }

    impl fmt::Display for KeyError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                KeyError::Unknown { key, .. } => write!(f, "unknown field `{key}`"),
                KeyError::Other(message) => f.write_str(message),
            }
        }
    }

    impl std::error::Error for KeyError {}

    impl de::Error for KeyError {
        fn custom<T: fmt::Display>(message: T) -> Self {
            KeyError::Other(message.to_string())
        }

        fn unknown_field(key: &str, expected: &'static [&'static str]) -> Self {
            KeyError::Unknown { key: key.to_owned(), expected }
        }
    }

    /// `expected` and `taken`, as one list that lives as long as the program: each list is
    /// made once (a handful: one per options type and wrapper), so an error costs no leak.
    fn with_taken(
        expected: &'static [&'static str],
        taken: &'static [&'static str],
    ) -> &'static [&'static str] {
        static MADE: std::sync::Mutex<Vec<&'static [&'static str]>> =
            std::sync::Mutex::new(Vec::new());
        let all: Vec<&'static str> = expected.iter().chain(taken).copied().collect();
        let mut made = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(list) = made.iter().find(|list| **list == all.as_slice()) {
            return list;
        }
        let list: &'static [&'static str] = Vec::leak(all);
        made.push(list);
        list
    }

    #[derive(Deserialize)]
    #[serde(transparent)]
    struct LeaseTime(#[serde(deserialize_with = "field::lease_time")] Duration);

    #[derive(Deserialize)]
    #[serde(transparent)]
    struct RenewInterval(#[serde(deserialize_with = "field::renew_interval")] Option<Duration>);

    #[derive(Deserialize)]
    #[serde(transparent)]
    struct RetryInterval(#[serde(deserialize_with = "field::retry_interval")] Option<Duration>);
}

/// [`LeaseTiming`] checked, with its defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Times {
    pub lease_time: Duration,
    /// The renewal cadence: chosen, or `lease_time / 3`.
    pub renew_interval: Duration,
    /// Whether `renew_interval` was set (the electors refuse it without `auto_extend`).
    pub renew_chosen: bool,
    pub retry_interval: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn error(timing: LeaseTiming, renews: bool) -> String {
        timing.resolve(renews).unwrap_err().to_string()
    }

    #[test]
    fn defaults_follow_the_lease() {
        let times = LeaseTiming::new().resolve(true).unwrap();
        assert_eq!(
            (times.lease_time, times.renew_interval, times.retry_interval),
            (DEFAULT_LEASE_TIME, Duration::from_secs(10), Duration::from_secs(1))
        );
        let short = LeaseTiming::new().lease_time(Duration::from_secs(2)).resolve(true).unwrap();
        assert_eq!(short.retry_interval, Duration::from_secs(2) / 3 / 4);
        let tiny = LeaseTiming::new().lease_time(MS).resolve(false).unwrap();
        assert_eq!((tiny.renew_interval, tiny.retry_interval), (MS, MS));
    }

    #[test]
    fn one_floor_and_one_message_per_setting() {
        assert_eq!(
            error(LeaseTiming::new().lease_time(Duration::ZERO), false),
            "invalid `lease_time` 0ns: must be at least 1ms"
        );
        assert!(error(LeaseTiming::new().lease_time(2 * MS), true).contains("at least 3ms"));
        assert_eq!(
            error(LeaseTiming::new().renew_interval(Duration::from_secs(16)), false),
            "invalid `renew_interval` 16s: must be between 1ms and lease_time / 2 (15s) so \
             renewals beat the lease"
        );
        assert_eq!(
            error(LeaseTiming::new().retry_interval(Duration::ZERO), true),
            "invalid `retry_interval` 0ns: must be at least 1ms"
        );
        assert!(
            LeaseTiming::new().retry_interval(Duration::from_secs(60)).resolve(true).is_ok(),
            "a pause longer than the lease is the caller's choice"
        );
    }
}
