//! Options from configuration (feature `serde`): each options type deserializes with serde's
//! derive (as a "remote" of itself) and is then checked exactly as the builders' values are,
//! so a bad value fails at load time with the same message.

/// Implements `Deserialize` (derived, then checked with `$check`) and `Serialize` (derived)
/// for an options type whose derive used `#[serde(remote = "Self")]`.
macro_rules! validated_serde {
    ($type:ty, $check:expr) => {
        #[cfg(feature = "serde")]
        impl<'de> serde::Deserialize<'de> for $type {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let options = <$type>::deserialize(deserializer)?;
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
