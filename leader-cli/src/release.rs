//! `leader release <group> --token … | --fence … | --holder … [--now]`: end a slot its
//! holder cannot release, keeping the guarantee unless `--now` says otherwise.

use std::process::ExitCode;

use leader::LeaseToken;
use leader::store::{ReleaseOutcome, Revocation, SlotRef};

use crate::args::{Cli, Failure};

/// How the command line names the slot: exactly one of the three.
pub struct Named<'a> {
    pub token: Option<&'a str>,
    pub fence: Option<u64>,
    pub holder: Option<&'a str>,
}

pub async fn run(cli: &Cli, group: &str, named: Named<'_>, now: bool) -> Result<ExitCode, Failure> {
    let key = cli.key(group)?;
    let token = named.token.map(str::parse::<LeaseToken>).transpose()?;
    let store = cli.store().await?;
    let slot = match (token, named.fence, named.holder) {
        (Some(token), None, None) => SlotRef::Token(token),
        (None, Some(fence), None) => SlotRef::Fence(fence),
        (None, None, Some(holder)) => {
            let state = store.state(&key).await?;
            let fences: Vec<u64> = state
                .leaders
                .iter()
                .filter(|slot| slot.holder == holder)
                .map(|slot| slot.fence)
                .collect();
            match fences.as_slice() {
                [fence] => SlotRef::Fence(*fence),
                [] => {
                    eprintln!(
                        "not held: {holder:?} holds no live slot of group {group}; nothing was changed"
                    );
                    return Ok(ExitCode::from(1));
                }
                _ => {
                    return Err(format!(
                        "{holder:?} holds {} slots of group {group} (fences {fences:?}); name one with --fence",
                        fences.len()
                    )
                    .into());
                }
            }
        }
        _ => return Err("name the slot with one of --token, --fence or --holder".into()),
    };
    let how = if now { Revocation::Now } else { Revocation::AtExpiry };
    match store.revoke(&key, slot, how).await? {
        ReleaseOutcome::Released => {
            println!(
                "freed the slot of group {group} now; its holder may act until its next renewal is refused"
            );
            Ok(ExitCode::SUCCESS)
        }
        ReleaseOutcome::Kept { expires_in } => {
            println!(
                "ended the slot of group {group}: its holder's next renewal is refused, and the slot \
                 is handed on only once the holder's deadline can have passed ({:.1}s)",
                expires_in.as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        ReleaseOutcome::NotHeld => {
            eprintln!("not held: no live slot of group {group} is named so; nothing was changed");
            Ok(ExitCode::from(1))
        }
        other => {
            Err(format!("the store answered {other:?}, which this command does not know").into())
        }
    }
}
