//! Compile-time behaviour of the macros: every mistake is a `compile_error!` at the
//! offending token (checked `.stderr` files). The fn shapes that compile and run are
//! ordinary tests (`tests/pass.rs`), so that trybuild only checks its cases (with a case
//! to run, it builds every dependency too).
//!
//! Regenerate the `.stderr` files after a deliberate change with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}
