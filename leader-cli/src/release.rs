//! `leader release <group> --token …`: free a stuck slot, token-checked.

use std::process::ExitCode;
use std::time::Duration;

use leader::LeaseToken;
use leader::store::ReleaseOutcome;

use crate::args::{Cli, Failure};

pub async fn run(cli: &Cli, group: &str, token: &str) -> Result<ExitCode, Failure> {
    let key = cli.key(group)?;
    let token: LeaseToken = token.parse()?;
    let store = cli.store().await?;
    match store.release(&key, token, Duration::ZERO).await? {
        ReleaseOutcome::Released | ReleaseOutcome::Kept { .. } => {
            println!("released the slot of group {group} held under that token");
            Ok(ExitCode::SUCCESS)
        }
        ReleaseOutcome::NotHeld => {
            eprintln!(
                "not held: no live slot of group {group} has that token; nothing was changed"
            );
            Ok(ExitCode::from(1))
        }
        other => {
            Err(format!("the store answered {other:?}, which this command does not know").into())
        }
    }
}
