//! The table the harness prints, in Markdown (as the README shows it) or JSON.

use serde_json::json;

use crate::lab::Outcome;

/// The header of the table.
pub const HEADER: &str = "| scenario | fault | candidates | N | max live slots (store) | max believers | writes accepted | stale writes accepted | writes after a newer grant | late writes rejected | recovery ms | longest below N, ms | slots leaked | verdict |\n\
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

/// One row of the table.
pub fn row(outcome: &Outcome) -> String {
    let (s, v) = (&outcome.scenario, &outcome.verdict);
    let believers = if s.store_forgets_grants() && v.max_believers > s.max_leaders as usize {
        format!("{} (store forgot grants)", v.max_believers)
    } else {
        v.max_believers.to_string()
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {} |",
        s.name,
        s.described,
        s.candidates,
        s.max_leaders,
        v.max_holders,
        believers,
        v.writes_accepted,
        v.stale_accepted,
        v.superseded_accepted,
        v.writes_rejected,
        v.recovery.as_secs_f64() * 1000.0,
        v.longest_short.as_secs_f64() * 1000.0,
        v.leaked,
        if v.violations.is_empty() { "pass" } else { "FAIL" },
    )
}

/// One outcome as JSON.
pub fn json(outcome: &Outcome) -> serde_json::Value {
    let (s, v) = (&outcome.scenario, &outcome.verdict);
    json!({
        "scenario": s.name,
        "fault": s.described,
        "candidates": s.candidates,
        "max_leaders": s.max_leaders,
        "terms": v.terms,
        "max_live_slots": v.max_holders,
        "max_believers": v.max_believers,
        "writes_accepted": v.writes_accepted,
        "stale_writes_accepted": v.stale_accepted,
        "writes_after_newer_grant": v.superseded_accepted,
        "late_writes_rejected": v.writes_rejected,
        "checks_past_deadline": v.checks_past_deadline,
        "recovery_ms": v.recovery.as_secs_f64() * 1000.0,
        "longest_below_n_ms": v.longest_short.as_secs_f64() * 1000.0,
        "slots_leaked": v.leaked,
        "violations": v.violations,
        "seconds": outcome.took.as_secs_f64(),
    })
}
