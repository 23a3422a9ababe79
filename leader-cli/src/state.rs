//! `leader state <group>`.

use std::process::ExitCode;

use crate::args::{Cli, Failure};
use crate::table;

pub async fn run(cli: &Cli, group: &str, json: bool) -> Result<ExitCode, Failure> {
    let key = cli.key(group)?;
    let store = cli.store().await?;
    let snapshot = store.state(&key).await?;
    if json {
        println!("{}", table::json(group, &key, &snapshot));
    } else {
        print!("{}", table::render(group, &key, &snapshot));
    }
    Ok(ExitCode::SUCCESS)
}
