//! The command line every example takes, as the demo does: a store URL alone, or after the
//! flag of its kind (`--redis`, `--postgres`, `--etcd`, `--memory`) or `--store` / `--url`;
//! then the example's own flags, each with one value (`--flag VALUE` or `--flag=VALUE`).
//! `--help` prints the usage. Anything else (an unknown flag, a second URL, a flag given
//! twice or without its value, a URL of another kind than its flag, a value the example
//! cannot read) is a usage error, exit status 2: never ignored.

// Each example uses the part it needs.
#![allow(dead_code)]

use leader::store::SharedStore;

/// The parsed command line.
pub struct Args {
    /// The store's URL (`memory://` when none was given).
    pub url: String,
    own: Vec<(&'static str, String)>,
}

impl Args {
    /// The command line of `example`, whose own flags are `own` (each `("--flag", "VALUE")`);
    /// exits with the usage on a mistake.
    pub fn parse(example: &str, own: &[(&'static str, &'static str)]) -> Args {
        let given: Vec<String> = std::env::args().skip(1).collect();
        if given.iter().any(|arg| arg == "--help" || arg == "-h") {
            println!("{}", usage(example, own));
            std::process::exit(0);
        }
        // `--flag=VALUE` is `--flag VALUE`.
        let given: Vec<String> = given
            .iter()
            .flat_map(|arg| match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => {
                    vec![flag.to_owned(), value.to_owned()]
                }
                _ => vec![arg.clone()],
            })
            .collect();
        Args::from(&given, own).unwrap_or_else(|mistake| fail(example, own, &mistake))
    }

    fn from(given: &[String], own: &[(&'static str, &'static str)]) -> Result<Args, String> {
        let (mut url, mut values) = (None, Vec::new());
        let mut given = given.iter();
        while let Some(arg) = given.next() {
            let mut value_of =
                |flag: &str| given.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
            let found = match arg.as_str() {
                "--store" | "--url" => Some(value_of(arg)?),
                kind @ ("--redis" | "--postgres" | "--etcd" | "--memory") => {
                    let value = value_of(kind)?;
                    let named = leader::store::store_kind_of(&value);
                    if named != kind.strip_prefix("--") {
                        let (article, name) = match &kind[2..] {
                            name @ "etcd" => ("an", name),
                            name => ("a", name),
                        };
                        return Err(format!("{kind} takes {article} {name} URL, not {value:?}"));
                    }
                    Some(value)
                }
                flag if flag.starts_with('-') => {
                    let Some((known, _)) = own.iter().find(|(known, _)| *known == flag) else {
                        return Err(format!("unknown flag {flag}"));
                    };
                    if values.iter().any(|(given, _)| given == known) {
                        return Err(format!("{flag} given twice"));
                    }
                    values.push((*known, value_of(flag)?));
                    None
                }
                positional => Some(positional.to_owned()),
            };
            if let Some(found) = found
                && let Some(first) = url.replace(found)
            {
                return Err(format!("one store URL at most; {first:?} was given first"));
            }
        }
        Ok(Args { url: url.unwrap_or_else(|| "memory://".to_owned()), own: values })
    }

    /// The value given to `flag`, one of the example's own.
    pub fn value(&self, flag: &str) -> Option<&str> {
        self.own.iter().find(|(known, _)| *known == flag).map(|(_, value)| value.as_str())
    }

    /// The value given to `flag`, read as `T`; a value that does not read is a usage error
    /// of `example`.
    pub fn parsed<T: std::str::FromStr>(
        &self,
        example: &str,
        own: &[(&'static str, &'static str)],
        flag: &str,
    ) -> Option<T> {
        let value = self.value(flag)?;
        let what = own.iter().find(|(known, _)| *known == flag).map_or("a value", |(_, what)| what);
        Some(
            value.parse().unwrap_or_else(|_| {
                fail(example, own, &format!("{flag} takes {what}, not {value:?}"))
            }),
        )
    }
}

/// Says `mistake` and how `example` is run, and exits with status 2.
fn fail(example: &str, own: &[(&'static str, &'static str)], mistake: &str) -> ! {
    eprintln!("{mistake}\n{}", usage(example, own));
    std::process::exit(2);
}

/// How `example` is run.
fn usage(example: &str, own: &[(&'static str, &'static str)]) -> String {
    let flags: String = own.iter().map(|(flag, value)| format!(" [{flag} {value}]")).collect();
    format!(
        "usage: cargo run --example {example} [-- [[--redis|--postgres|--etcd|--memory|--store|--url] \
         STORE_URL]{flags}], for example redis://127.0.0.1:6379, \
         postgres://postgres@127.0.0.1:5432/test or (built with --features etcd) \
         etcd://127.0.0.1:2379; without a URL, the in-memory store"
    )
}

/// Opens the store `url` names; on failure, says why once and exits with status 2.
pub async fn connect(url: &str) -> SharedStore {
    leader::store::connect(url).await.unwrap_or_else(|error| {
        // The error names the store and where it is (its password left out).
        eprintln!("cannot use the store: {}", leader::error_chain(&error));
        std::process::exit(2);
    })
}
