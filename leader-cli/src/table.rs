//! A group's state as a table or as JSON.

use std::time::Duration;

use leader::{ClaimInfo, LeaderGroupState, Preference};

/// A group's state as a table, the candidate its next free slot is kept for, and the holder
/// an operator prefers, if any.
pub fn render(
    snapshot: &LeaderGroupState,
    waiting: Option<&ClaimInfo>,
    preference: Option<&Preference>,
) -> String {
    let mut out = render_slots(snapshot);
    if let Some(preference) = preference {
        out.push_str(&format!(
            "preferred holder {} (for {} more)\n",
            shown(&preference.holder),
            seconds(preference.expires_in),
        ));
    }
    if let Some(claim) = waiting {
        out.push_str(&format!(
            "next free slot kept for {} (priority {}, waiting {}, announcement lapses in {}){}\n",
            shown(&claim.holder),
            claim.priority,
            seconds(claim.waited),
            seconds(claim.expires_in),
            if claim.is_preferred() { ", the preferred holder" } else { "" },
        ));
    }
    out
}

/// A group's live slots as a table.
pub fn render_slots(snapshot: &LeaderGroupState) -> String {
    let (group, key) = (&snapshot.name, &snapshot.key);
    let pending = match snapshot.pending.len() {
        0 => String::new(),
        n => format!(", {n} pending (granted, not acting yet: a lock-delay)"),
    };
    let mut out = match snapshot.max_leaders {
        Some(max) => format!(
            "group {group} (key {key}): {} of {max} slots held{pending}\n",
            snapshot.leaders.len()
        ),
        None => format!("group {group} (key {key}): no live slots\n"),
    };
    if snapshot.leaders.is_empty() && snapshot.pending.is_empty() {
        return out;
    }
    let every = snapshot.leaders.iter().chain(&snapshot.pending);
    let holder_width = every.map(|s| shown(&s.holder).len()).max().unwrap_or(0).max("HOLDER".len());
    out.push_str(&format!(
        "{:<holder_width$}  {:>20}  {:<20}  {:>10}\n",
        "HOLDER", "FENCE", "ACQUIRED (UTC)", "EXPIRES IN"
    ));
    let rows = snapshot
        .leaders
        .iter()
        .map(|slot| (slot, ""))
        .chain(snapshot.pending.iter().map(|slot| (slot, "  (pending)")));
    for (slot, note) in rows {
        out.push_str(&format!(
            "{:<holder_width$}  {:>20}  {:<20}  {:>10}{note}\n",
            shown(&slot.holder),
            slot.fence,
            time(slot.acquired_at, humantime::format_rfc3339_seconds),
            seconds(slot.expires_in),
        ));
    }
    out
}

/// A group's state as JSON, with the candidate its next free slot is kept for (`waiting`,
/// or null) and the operator's preference (`preferred`, or null).
pub fn json(
    snapshot: &LeaderGroupState,
    waiting: Option<&ClaimInfo>,
    preference: Option<&Preference>,
) -> serde_json::Value {
    let mut value = json_slots(snapshot);
    value["preferred"] = match preference {
        Some(preference) => serde_json::json!({
            "holder": preference.holder,
            "expires_in_ms": preference.expires_in.as_millis() as u64,
        }),
        None => serde_json::Value::Null,
    };
    value["waiting"] = match waiting {
        Some(claim) => serde_json::json!({
            "holder": claim.holder,
            "priority": claim.priority,
            "waited_ms": claim.waited.as_millis() as u64,
            "expires_in_ms": claim.expires_in.as_millis() as u64,
            "preferred": claim.is_preferred(),
        }),
        None => serde_json::Value::Null,
    };
    value
}

/// A group's live slots as JSON.
pub fn json_slots(snapshot: &LeaderGroupState) -> serde_json::Value {
    let slot = |slot: &leader::SlotInfo| {
        serde_json::json!({
            "holder": slot.holder,
            "fence": slot.fence,
            "acquired_at": time(slot.acquired_at, humantime::format_rfc3339_millis),
            "expires_in_ms": slot.expires_in.as_millis() as u64,
        })
    };
    serde_json::json!({
        "group": snapshot.name,
        "key": snapshot.key,
        "max_leaders": snapshot.max_leaders,
        "active": snapshot.leaders.len(),
        "slots": snapshot.leaders.iter().map(slot).collect::<Vec<_>>(),
        "pending": snapshot.pending.iter().map(slot).collect::<Vec<_>>(),
    })
}

/// A holder id as a terminal may show it: control characters escaped (the library refuses
/// them in the ids it writes, but a store may hold another's data).
fn shown(holder: &str) -> String {
    match holder.chars().any(char::is_control) {
        true => holder.escape_debug().to_string(),
        false => holder.to_owned(),
    }
}

/// A time in RFC 3339, or `?` for one no calendar format shows (past year 9999).
fn time(
    at: std::time::SystemTime,
    format: fn(std::time::SystemTime) -> humantime::Rfc3339Timestamp,
) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    match write!(text, "{}", format(at)) {
        Ok(()) => text,
        Err(_) => "?".to_owned(),
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}
