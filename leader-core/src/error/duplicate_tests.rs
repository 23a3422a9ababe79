//! The chain of an error, and a duplicate's reading as the original.

use std::sync::Arc;

use super::{Error, error_chain as chain};

/// A chain of plain messages, outermost first.
#[derive(Debug)]
struct Chained(&'static str, Option<Box<Chained>>);

impl std::fmt::Display for Chained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Chained {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.1.as_deref().map(|cause| cause as _)
    }
}

fn chained(messages: &[&'static str]) -> Chained {
    let (first, rest) = messages.split_first().unwrap();
    Chained(first, (!rest.is_empty()).then(|| Box::new(chained(rest))))
}

#[test]
fn a_chain_leaves_out_only_a_cause_that_ends_the_line_already() {
    let cases: [(&[&'static str], &str); 5] = [
        (&["command_timeout exceeded", "timeout"], "command_timeout exceeded: timeout"),
        (&["invalid port 6379", "6"], "invalid port 6379: 6"),
        (&["a", "b", "a"], "a: b: a"),
        (&["", "cause"], "cause"),
        (&["unavailable: refused", "refused", "refused"], "unavailable: refused"),
    ];
    for (messages, expected) in cases {
        assert_eq!(chain(&chained(messages)), expected, "{messages:?}");
    }
}

#[test]
fn a_duplicate_reads_as_the_original_with_its_whole_chain() {
    let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    let outer = std::io::Error::other(inner);
    let original = Error::Unavailable {
        store: "redis",
        endpoint: "redis://cache:6379".into(),
        operation: "state",
        cause: Box::new(outer),
    };
    let expected = chain(&original);
    let client = chain(original.client_error().unwrap());
    let shared = Arc::new(original);
    let copy = Error::duplicate(&shared);
    assert_eq!(chain(&copy), expected);
    assert_eq!(chain(copy.client_error().unwrap()), client);
    assert!(copy.is_transient());
    assert!(matches!(copy, Error::Unavailable { store: "redis", operation: "state", .. }));
}

#[test]
fn a_store_error_names_the_store_its_endpoint_the_operation_and_the_root_cause_once() {
    let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    let wrapped = std::io::Error::other(std::io::Error::other(refused));
    let error = Error::Unavailable {
        store: "redis",
        endpoint: String::new(),
        operation: "state",
        cause: Box::new(wrapped),
    }
    .at("redis://cache:6379")
    .during("connect");
    assert_eq!(
        chain(&error),
        "redis store at redis://cache:6379 unavailable during connect: refused"
    );
}
