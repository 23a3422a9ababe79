//! `leader`: show, watch and free the slots of leader groups kept in Redis, Valkey,
//! PostgreSQL or etcd.
#![forbid(unsafe_code)]

mod args;
mod groups;
mod prefer;
mod release;
mod state;
mod table;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::State { group, json } => state::run(&cli, group, *json).await,
        Command::Watch { group, duration, json } => watch::run(&cli, group, *duration, *json).await,
        Command::Groups { json } => groups::run(&cli, *json).await,
        Command::Prefer { group, holder, ttl, clear: _ } => {
            prefer::run(&cli, group, holder.as_deref(), *ttl).await
        }
        Command::Release { group, token, fence, holder, now } => {
            let slot = release::Named {
                token: token.as_deref(),
                fence: *fence,
                holder: holder.as_deref(),
            };
            release::run(&cli, group, slot, *now).await
        }
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", leader::error_chain(&*error));
            ExitCode::from(2)
        }
    }
}
