//! Attribute macros of the `leader` crate. Use them through `leader`, which re-exports them.
//!
//! The macros themselves arrive with their own issue; this crate reserves the name and the
//! place in the workspace.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
