//! `leader state <group>`.

use std::process::ExitCode;

use leader::{LeaderGroupElectionOptions, LeaderGroupElector};

use crate::args::{Cli, Failure};
use crate::table;

pub async fn run(cli: &Cli, group: &str, json: bool) -> Result<ExitCode, Failure> {
    let store = cli.store().await?;
    // The reader's own `max_leaders` is never shown: an empty group shows none.
    let options = LeaderGroupElectionOptions::new(1).keys(cli.keys());
    let state = LeaderGroupElector::new(store, options)?.state(group).await?;
    if json {
        println!("{}", table::json(&state));
    } else {
        print!("{}", table::render(&state));
    }
    Ok(ExitCode::SUCCESS)
}
