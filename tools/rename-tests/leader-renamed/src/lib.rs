//! Nothing here: see `tests/rename.rs`.
