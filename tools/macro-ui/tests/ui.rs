//! Compile-time behaviour of the macros: every supported fn shape compiles and runs, and
//! every mistake is a `compile_error!` at the offending token (checked `.stderr` files).
//!
//! Regenerate the `.stderr` files after a deliberate change with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
