//! Options from configuration (feature `serde`): each options type deserializes with serde's
//! derive (as a "remote" of itself) and is then checked exactly as the builders' values are,
//! so a bad value fails at load time with the same message.

/// Implements `Deserialize` (derived, then checked with `$check`) and `Serialize` (derived)
/// for an options type whose derive used `#[serde(remote = "Self")]`. With `embeds timing`,
/// the type's `timing` field (a [`LeaseTiming`](crate::LeaseTiming), `#[serde(flatten,
/// skip_deserializing)]`) is read from the same table by [`crate::timing::config`], each of
/// its keys where it stands, and the rest by the derive.
macro_rules! validated_serde {
    ($type:ty, $check:expr, embeds timing) => {
        #[cfg(feature = "serde")]
        impl $crate::timing::config::EmbedsTiming for $type {
            fn derived<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$type>::deserialize(d)
            }

            fn set_timing(&mut self, timing: $crate::LeaseTiming) {
                self.timing = timing;
            }
        }

        $crate::serde_support::validated_serde!(@impl $type, $check,
            $crate::timing::config::deserialize::<$type, D>);
    };
    ($type:ty, $check:expr) => {
        $crate::serde_support::validated_serde!(@impl $type, $check, <$type>::deserialize);
    };
    (@impl $type:ty, $check:expr, $derived:expr) => {
        #[cfg(feature = "serde")]
        impl<'de> serde::Deserialize<'de> for $type {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let options = $derived(deserializer)?;
                let check: fn(&$type) -> Result<(), $crate::Error> = $check;
                check(&options).map_err(serde::de::Error::custom)?;
                Ok(options)
            }
        }

        #[cfg(feature = "serde")]
        impl serde::Serialize for $type {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                <$type>::serialize(self, serializer)
            }
        }
    };
}

pub(crate) use validated_serde;

/// Fields of options in configuration files: durations in the one syntax ([`parse`](crate::duration::parse)), then
/// each option's own check, reported at the key (a check that compares two options is made
/// once the whole table is read, and names both).
#[cfg(feature = "serde")]
pub(crate) mod field {
    use std::time::Duration;

    use serde::Deserializer;
    use serde::de::{Error as _, Visitor};

    /// Reads a duration written as text.
    struct Text;

    impl Visitor<'_> for Text {
        type Value = Duration;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a duration such as \"500ms\", \"10s\", \"1m30s\", \"2h\" or \"PT0.5S\"")
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Duration, E> {
            crate::duration::parse(text).map_err(E::custom)
        }
    }

    /// An optional duration written as text.
    struct Optional;

    impl<'de> Visitor<'de> for Optional {
        type Value = Option<Duration>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            Text.expecting(f)
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(Text).map(Some)
        }
    }

    /// One deserializer per duration option, named as the option, with its check.
    macro_rules! fields {
        ($($name:ident: $check:path;)*) => {
            $(
                pub(crate) fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
                    let value = d.deserialize_str(Text)?;
                    $check(stringify!($name), value).map_err(D::Error::custom)
                }
            )*
        };
    }

    /// The same for options that may be left out (`None`).
    macro_rules! optional_fields {
        ($($name:ident: $check:path;)*) => {
            $(
                pub(crate) fn $name<'de, D: Deserializer<'de>>(
                    d: D,
                ) -> Result<Option<Duration>, D::Error> {
                    match d.deserialize_option(Optional)? {
                        Some(value) => {
                            $check(stringify!($name), value).map(Some).map_err(D::Error::custom)
                        }
                        None => Ok(None),
                    }
                }
            )*
        };
    }

    fields! {
        wait_time: crate::duration::within_limit;
        lease_time: crate::duration::positive;
        min_lease_time: crate::duration::within_limit;
        drop_report_interval: crate::duration::positive;
        step_down_delay: crate::duration::positive;
    }

    optional_fields! {
        renew_interval: crate::duration::within_limit;
        retry_interval: crate::duration::positive;
        retry_jitter: crate::duration::within_limit;
        handover_grace: crate::duration::within_limit;
    }

    /// `max_leaders`, checked to be at least 1 where it is read, so an error points at the
    /// key.
    pub(crate) struct MaxLeaders(pub u32);

    impl<'de> serde::Deserialize<'de> for MaxLeaders {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            max_leaders(d).map(MaxLeaders)
        }
    }

    /// [`MaxLeaders`], as a field's `deserialize_with`.
    pub(crate) fn max_leaders<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let max = <u32 as serde::Deserialize>::deserialize(d)?;
        if max == 0 {
            return Err(D::Error::custom(crate::Error::invalid_option(
                "max_leaders",
                max,
                "must be at least 1 (1 is a single leader)",
            )));
        }
        Ok(max)
    }

    /// A holder id, checked where it is read.
    pub(crate) fn holder_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let holder = <Option<String> as serde::Deserialize>::deserialize(d)?;
        if let Some(holder) = &holder {
            crate::holder::check_holder_id(holder).map_err(D::Error::custom)?;
        }
        Ok(holder)
    }
}
