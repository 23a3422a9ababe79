#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[doc(inline)]
pub use leader_core::*;

#[cfg(feature = "macros")]
#[doc(inline)]
pub use leader_macros::{leader_election, leader_group_election};
