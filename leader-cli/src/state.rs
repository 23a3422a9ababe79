//! `leader state <group>`.

use std::process::ExitCode;

use leader::{LeaderGroupElectionOptions, LeaderGroupElector};

use crate::args::{Cli, Failure};
use crate::table;

pub async fn run(cli: &Cli, group: &str, json: bool) -> Result<ExitCode, Failure> {
    let store = cli.store().await?;
    // The reader's own `max_leaders` is never shown: an empty group shows none.
    let options = LeaderGroupElectionOptions::new(1).keys(cli.keys());
    let elector = LeaderGroupElector::new(store, options)?;
    let state = elector.state(group).await?;
    let waiting = elector.waiting_candidate(group).await?;
    let preference = elector.preference(group).await?;
    if json {
        println!("{}", table::json(&state, waiting.as_ref(), preference.as_ref()));
    } else {
        print!("{}", table::render(&state, waiting.as_ref(), preference.as_ref()));
    }
    Ok(ExitCode::SUCCESS)
}
