//! What a connection string's `sslmode` and `sslrootcert` mean, as libpq reads them.
//!
//! tokio-postgres knows three modes (`disable`, `prefer`, `require`) and verifies nothing by
//! itself; libpq knows six and verifies only in `verify-ca` and `verify-full` (and in
//! `require` when a root certificate is given). The store reads both parameters here, hands
//! tokio-postgres the mode that says whether to encrypt, and keeps what to verify for its
//! own TLS connector (`tls.rs`).

use std::fmt;
use std::path::PathBuf;

use deadpool_postgres::tokio_postgres::config::SslMode as ClientMode;

/// libpq's `sslmode`, the six values and their meanings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plain text only.
    Disable,
    /// Encrypt if the server insists, without verifying (taken as `prefer` here: the
    /// client cannot try plain text first, and both accept either kind of server).
    Allow,
    /// Encrypt when the server offers it, without verifying (libpq's default).
    Prefer,
    /// Encrypt always, without verifying unless a root certificate is given (then as
    /// `verify-ca`).
    Require,
    /// Encrypt always; the certificate must chain to a trusted root, whatever it names.
    VerifyCa,
    /// Encrypt always; the certificate must chain to a trusted root and name the host.
    VerifyFull,
}

/// What the store's TLS connector checks of a server's certificate.
#[cfg_attr(not(feature = "postgres-tls"), allow(dead_code))] // plain text verifies nothing
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Nothing: the connection is encrypted, the server not authenticated.
    Nothing,
    /// The chain to a trusted root, not the name.
    Chain,
    /// The chain and the host's name.
    ChainAndName,
}

/// Where the roots for verification come from: `sslrootcert`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// No `sslrootcert`: the system's roots (and any the builder adds).
    Default,
    /// `sslrootcert=system`: the system's roots.
    System,
    /// `sslrootcert=<path>`: the PEM file's certificates (and any the builder adds), not the
    /// system's.
    File(PathBuf),
}

/// The TLS parameters read from a connection string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsParams {
    /// `sslmode`; `prefer` when absent.
    pub(crate) mode: SslMode,
    /// `sslrootcert`.
    pub(crate) root_cert: RootCert,
}

impl SslMode {
    fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The mode tokio-postgres negotiates with: whether to encrypt at all.
    pub(crate) fn client_mode(self) -> ClientMode {
        match self {
            SslMode::Disable => ClientMode::Disable,
            SslMode::Allow | SslMode::Prefer => ClientMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => ClientMode::Require,
        }
    }

    /// libpq's mode for a tokio-postgres configuration (a pool the application made).
    pub(crate) fn of_client(mode: ClientMode) -> Self {
        match mode {
            ClientMode::Disable => SslMode::Disable,
            ClientMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        }
    }

    /// What to verify in this mode; `roots_given` when `sslrootcert` or the builder named
    /// root certificates (which turns `require` into `verify-ca`, as in libpq).
    #[cfg_attr(not(feature = "postgres-tls"), allow(dead_code))] // plain text verifies nothing
    pub(crate) fn verify(self, roots_given: bool) -> Verify {
        match self {
            SslMode::Disable | SslMode::Allow | SslMode::Prefer => Verify::Nothing,
            SslMode::Require if roots_given => Verify::Chain,
            SslMode::Require => Verify::Nothing,
            SslMode::VerifyCa => Verify::Chain,
            SslMode::VerifyFull => Verify::ChainAndName,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// Takes `sslmode` and `sslrootcert` out of `url` (the URL or the `key=value` form) and
/// puts back an `sslmode` tokio-postgres reads; the error names the bad value and what is
/// allowed.
pub(crate) fn take_tls_params(url: &str) -> Result<(String, TlsParams), String> {
    // A URL by its scheme, as tokio-postgres tells them: a `key=value` string may hold `://`
    // in a value.
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let (rest, pairs) = if is_url { url_pairs(url) } else { keyword_pairs(url) };
    let mut params = TlsParams { mode: SslMode::Prefer, root_cert: RootCert::Default };
    for (key, value) in pairs {
        match key.as_str() {
            "sslmode" => {
                params.mode = SslMode::parse(&value).ok_or_else(|| {
                    format!(
                        "sslmode {value:?} is not one of disable, allow, prefer, require, \
                         verify-ca, verify-full"
                    )
                })?;
            }
            _ => {
                params.root_cert = match value.as_str() {
                    "" => return Err("sslrootcert is empty; name a PEM file or `system`".into()),
                    "system" => RootCert::System,
                    path => RootCert::File(PathBuf::from(path)),
                };
            }
        }
    }
    if params.root_cert == RootCert::System && params.mode != SslMode::VerifyFull {
        // libpq refuses it too: the system's roots vouch for names, not for a chain alone.
        return Err(format!(
            "sslrootcert=system needs sslmode=verify-full (not `{}`)",
            params.mode
        ));
    }
    let client = match params.mode.client_mode() {
        ClientMode::Disable => "disable",
        ClientMode::Require => "require",
        _ => "prefer",
    };
    let separator = if is_url {
        if rest.contains('?') { "&" } else { "?" }
    } else if rest.trim().is_empty() {
        ""
    } else {
        " "
    };
    Ok((format!("{rest}{separator}sslmode={client}"), params))
}

/// The TLS parameters the store reads itself.
fn is_tls_key(key: &str) -> bool {
    key == "sslmode" || key == "sslrootcert"
}

/// A URL without its TLS query parameters, and those parameters (decoded).
fn url_pairs(url: &str) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), Vec::new()) };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key);
        if is_tls_key(&key) {
            taken.push((key, percent_decode(value)));
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    (rest, taken)
}

/// `%XX` sequences decoded (a malformed one is kept as written).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[at] == b'%'
            && let (Some(high), Some(low)) =
                (bytes.get(at + 1).copied().and_then(hex), bytes.get(at + 2).copied().and_then(hex))
        {
            out.push((high * 16 + low) as u8);
            at += 3;
            continue;
        }
        out.push(bytes[at]);
        at += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `key=value` connection string without its TLS pairs, and those pairs (unquoted), read
/// as libpq and tokio-postgres read it: values in single quotes or up to a space, with
/// backslash escapes. A string it cannot read is returned whole, for tokio-postgres to
/// refuse with its own message.
fn keyword_pairs(text: &str) -> (String, Vec<(String, String)>) {
    let mut kept = String::new();
    let mut taken = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut at = 0;
    let skip_spaces = |at: &mut usize| {
        while *at < chars.len() && chars[*at].is_whitespace() {
            *at += 1;
        }
    };
    loop {
        skip_spaces(&mut at);
        if at == chars.len() {
            return (kept, taken);
        }
        let start = at;
        while at < chars.len() && !chars[at].is_whitespace() && chars[at] != '=' {
            at += 1;
        }
        let key: String = chars[start..at].iter().collect();
        skip_spaces(&mut at);
        if chars.get(at) != Some(&'=') {
            return (text.to_owned(), Vec::new());
        }
        at += 1;
        skip_spaces(&mut at);
        let mut value = String::new();
        let quoted = chars.get(at) == Some(&'\'');
        if quoted {
            at += 1;
        }
        loop {
            match chars.get(at) {
                None if quoted => return (text.to_owned(), Vec::new()),
                None => break,
                Some('\'') if quoted => {
                    at += 1;
                    break;
                }
                Some(c) if c.is_whitespace() && !quoted => break,
                Some('\\') => match chars.get(at + 1) {
                    Some(escaped) => {
                        value.push(*escaped);
                        at += 2;
                    }
                    None => return (text.to_owned(), Vec::new()),
                },
                Some(c) => {
                    value.push(*c);
                    at += 1;
                }
            }
        }
        if is_tls_key(&key) {
            taken.push((key, value));
        } else {
            if !kept.is_empty() {
                kept.push(' ');
            }
            kept.extend(&chars[start..at]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(url: &str) -> (String, SslMode, RootCert) {
        let (rest, params) = take_tls_params(url).unwrap();
        (rest, params.mode, params.root_cert)
    }

    #[test]
    fn every_libpq_mode_is_read_and_handed_on_as_tokio_postgres_reads_it() {
        let cases = [
            ("disable", "disable", SslMode::Disable),
            ("allow", "prefer", SslMode::Allow),
            ("prefer", "prefer", SslMode::Prefer),
            ("require", "require", SslMode::Require),
            ("verify-ca", "require", SslMode::VerifyCa),
            ("verify-full", "require", SslMode::VerifyFull),
        ];
        for (libpq, client, mode) in cases {
            let url = format!("postgres://app@db/x?application_name=a&sslmode={libpq}");
            let expected = format!("postgres://app@db/x?application_name=a&sslmode={client}");
            assert_eq!(taken(&url), (expected, mode, RootCert::Default), "{libpq}");
            let keywords = format!("host=db sslmode={libpq} user=app");
            let expected = format!("host=db user=app sslmode={client}");
            assert_eq!(taken(&keywords), (expected, mode, RootCert::Default), "{libpq}");
        }
    }

    #[test]
    fn a_keyword_string_is_not_a_url_for_a_value_with_a_scheme() {
        let (rest, mode, _) = taken("host=db sslmode=verify-full application_name=x://y");
        assert_eq!(
            (rest.as_str(), mode),
            ("host=db application_name=x://y sslmode=require", SslMode::VerifyFull)
        );
    }

    #[test]
    fn no_sslmode_is_prefer() {
        assert_eq!(
            taken("postgres://postgres@127.0.0.1:5432/test"),
            (
                "postgres://postgres@127.0.0.1:5432/test?sslmode=prefer".to_owned(),
                SslMode::Prefer,
                RootCert::Default
            )
        );
        assert_eq!(taken("").0, "sslmode=prefer");
    }

    #[test]
    fn the_root_certificate_is_a_file_or_the_system() {
        let (rest, mode, root) =
            taken("postgres://db/x?sslrootcert=%2Fetc%2Fca.pem&sslmode=verify-ca");
        assert_eq!(
            (rest.as_str(), mode, root),
            (
                "postgres://db/x?sslmode=require",
                SslMode::VerifyCa,
                RootCert::File("/etc/ca.pem".into())
            )
        );
        let (rest, _, root) = taken("host=db sslrootcert='/my ca.pem' sslmode=verify-full");
        assert_eq!(
            (rest.as_str(), root),
            ("host=db sslmode=require", RootCert::File("/my ca.pem".into()))
        );
        assert_eq!(
            taken("postgres://db/x?sslmode=verify-full&sslrootcert=system").2,
            RootCert::System
        );
    }

    #[test]
    fn bad_values_are_named() {
        let err = take_tls_params("postgres://db/x?sslmode=verify_full").unwrap_err();
        assert!(err.starts_with("sslmode \"verify_full\" is not one of disable, allow"), "{err}");
        let err =
            take_tls_params("postgres://db/x?sslmode=require&sslrootcert=system").unwrap_err();
        assert_eq!(err, "sslrootcert=system needs sslmode=verify-full (not `require`)");
        assert!(take_tls_params("postgres://db/x?sslrootcert=").is_err());
    }

    #[test]
    fn what_each_mode_verifies() {
        use SslMode::*;
        for mode in [Disable, Allow, Prefer] {
            assert_eq!(mode.verify(true), Verify::Nothing, "{mode}");
        }
        assert_eq!(Require.verify(false), Verify::Nothing);
        assert_eq!(Require.verify(true), Verify::Chain);
        assert_eq!(VerifyCa.verify(false), Verify::Chain);
        assert_eq!(VerifyFull.verify(false), Verify::ChainAndName);
    }
}
