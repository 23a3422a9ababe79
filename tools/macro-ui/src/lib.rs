//! Nothing here: `tests/ui.rs` runs the macros' compile-time cases with trybuild.
