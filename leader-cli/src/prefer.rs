//! `leader prefer <group> --holder ID [--for 10m] | --clear`: ask for a named holder to
//! lead a group, or withdraw the request.

use std::process::ExitCode;
use std::time::Duration;

use leader::{LeaderGroupElectionOptions, LeaderGroupElector};

use crate::args::{Cli, Failure};

/// Prefers `holder` for `ttl` (`None`: withdraws the group's preference).
pub async fn run(
    cli: &Cli,
    group: &str,
    holder: Option<&str>,
    ttl: Duration,
) -> Result<ExitCode, Failure> {
    let store = cli.store().await?;
    let options = LeaderGroupElectionOptions::new(1).keys(cli.keys());
    let elector = LeaderGroupElector::new(store, options)?;
    let Some(holder) = holder else {
        elector.clear_preference(group).await?;
        println!("withdrew any preference for group {group}: claims go by priority again");
        return Ok(ExitCode::SUCCESS);
    };
    elector.prefer(group, holder, ttl).await?;
    let state = elector.state(group).await?;
    let leads = state.leaders.iter().any(|slot| slot.holder == holder);
    let now = if leads {
        "it leads now"
    } else {
        "once it waits as a `Leadership` with a priority, a leader that has a priority steps \
         down for it (one without does not)"
    };
    println!(
        "preferred {holder:?} for group {group} for {}: {now}",
        humantime::format_duration(ttl)
    );
    Ok(ExitCode::SUCCESS)
}
