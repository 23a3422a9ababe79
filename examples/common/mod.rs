//! The command line every example takes, as the demo does: a store URL alone, or after the
//! flag of its kind (`--redis`, `--postgres`, `--etcd`, `--memory`) or `--store` / `--url`;
//! then the example's own flags, each with one value. Anything else (an unknown flag, a
//! second URL, a flag without its value, a URL of another kind than its flag) is a usage
//! error, exit status 2: never ignored.

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
        Args::from(&given, own).unwrap_or_else(|mistake| {
            eprintln!("{mistake}\n{}", usage(example, own));
            std::process::exit(2);
        })
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
                        return Err(format!("{kind} takes a {} URL, not {value:?}", &kind[2..]));
                    }
                    Some(value)
                }
                flag if flag.starts_with('-') => {
                    let Some((known, _)) = own.iter().find(|(known, _)| *known == flag) else {
                        return Err(format!("unknown flag {flag}"));
                    };
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
}

/// How `example` is run.
fn usage(example: &str, own: &[(&'static str, &'static str)]) -> String {
    let flags: String = own.iter().map(|(flag, value)| format!(" [{flag} {value}]")).collect();
    format!(
        "usage: cargo run --example {example} [-- [[--redis|--postgres|--etcd|--store] \
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
