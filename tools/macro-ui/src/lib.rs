//! Nothing here: `tests/ui.rs` checks the macros' compile-time errors with trybuild, and
//! `tests/pass.rs` runs the fn shapes they accept.
