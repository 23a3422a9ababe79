//! Every fn shape the macros support compiles and runs: each case of `tests/pass/` is a
//! module here, and its `main` runs as a test. (The mistakes are trybuild's cases, in
//! `tests/ui.rs`: with no case to run there, trybuild only checks, never builds.)

#[path = "pass/all_arguments.rs"]
mod all_arguments;

#[test]
fn all_arguments() -> Result<(), leader::Error> {
    all_arguments::main()
}

#[path = "pass/coercions.rs"]
mod coercions;

#[test]
fn coercions() -> Result<(), leader::Error> {
    coercions::main()
}

#[path = "pass/free_fn.rs"]
mod free_fn;

#[test]
fn free_fn() -> Result<(), leader::Error> {
    free_fn::main()
}

#[path = "pass/generics.rs"]
mod generics;

#[test]
fn generics() -> Result<(), leader::Error> {
    generics::main()
}

#[path = "pass/method_receivers.rs"]
mod method_receivers;

#[test]
fn method_receivers() -> Result<(), leader::Error> {
    method_receivers::main()
}

#[path = "pass/with_tracing_instrument.rs"]
mod with_tracing_instrument;

#[test]
fn with_tracing_instrument() -> Result<(), leader::Error> {
    with_tracing_instrument::main()
}
