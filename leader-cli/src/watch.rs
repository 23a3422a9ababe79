//! `leader watch <group>`: print the group each time its holders change (a grant, a
//! release, an expiry), as a `GroupObserver` sees it: from the store's events, with no
//! polling.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use leader::{GroupObserver, LeaderGroupElectionOptions, LeaderGroupElector, LeaderGroupState};
use tokio::time::{Instant, sleep_until};

use crate::args::{Cli, Failure};
use crate::table;

pub async fn run(
    cli: &Cli,
    group: &str,
    duration: Option<Duration>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let store = cli.store().await?;
    // The observer's own `max_leaders` is never shown: an empty group shows none.
    let options = LeaderGroupElectionOptions::new(1).keys(cli.keys());
    let mut observer = LeaderGroupElector::new(store, options)?.observe(group).await?;
    let end = duration.map(|d| Instant::now() + d);
    let redraw_in_place = !json && std::io::stdout().is_terminal();
    show(&observer.current(), json, redraw_in_place)?;
    loop {
        let ended = async {
            match end {
                Some(end) => sleep_until(end).await,
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        tokio::select! {
            changed = observer.changed() => match changed {
                Ok(state) => show(&state, json, redraw_in_place)?,
                // The observer keeps trying; say so, and show the state once it answers.
                Err(error) => report(&observer, &error, json)?,
            },
            () = ended => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// One change: the time, then the table (or one JSON object on one line).
fn show(state: &LeaderGroupState, json: bool, redraw_in_place: bool) -> Result<(), Failure> {
    let at = humantime::format_rfc3339_millis(SystemTime::now());
    let mut out = std::io::stdout().lock();
    if json {
        let mut line = table::json_slots(state);
        line["at"] = serde_json::Value::String(at.to_string());
        writeln!(out, "{line}")?;
    } else {
        let frame = table::render_slots(state);
        if redraw_in_place {
            write!(out, "\x1b[2J\x1b[H")?;
        }
        writeln!(out, "at {at}\n{frame}")?;
    }
    out.flush()?;
    Ok(())
}

/// A failure to read the group: on stderr (JSON on stdout with `--json`), then carry on.
fn report(observer: &GroupObserver, error: &leader::Error, json: bool) -> Result<(), Failure> {
    let at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let message = leader::error_chain(error);
    if json {
        let line = serde_json::json!({
            "at": at, "group": observer.name(), "key": observer.key(), "error": message,
        });
        println!("{line}");
    } else {
        eprintln!("at {at}: {message}; trying again");
    }
    Ok(())
}
