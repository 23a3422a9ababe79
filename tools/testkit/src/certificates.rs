//! A certificate authority and a server certificate for 127.0.0.1, made with `openssl`,
//! for the TLS tests of both stores.

use std::path::Path;
use std::process::Command;

/// Writes `ca.crt`, `ca.key`, `server.crt` and `server.key` (readable by its owner only)
/// into `dir`: a CA and a server certificate it signed for IP 127.0.0.1 and `localhost`.
pub fn make(dir: &Path) {
    make_for(dir, "IP:127.0.0.1,DNS:localhost");
}

/// As [`make`], with a server certificate for `names` (an X.509 `subjectAltName` list such
/// as `DNS:db.example`): one that names another host than the one a test connects to, as
/// Debian's default certificate names the machine rather than `127.0.0.1`.
pub fn make_for(dir: &Path, names: &str) {
    let run = |args: &[&str]| {
        let output = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    std::fs::write(dir.join("san.cnf"), format!("subjectAltName={names}\n")).unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=leader-test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=leader-test-server",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.cnf",
    ]);
    // PostgreSQL refuses a key that others can read.
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(dir.join("server.key"), owner_only).expect("chmod server.key");
}
