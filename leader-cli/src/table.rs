//! A group's state as a table or as JSON.

use std::time::Duration;

use leader::store::GroupSnapshot;

/// The state of `group` (key `key`) as a table.
pub fn render(group: &str, key: &str, snapshot: &GroupSnapshot) -> String {
    let mut out = match snapshot.max_leaders {
        Some(max) => {
            format!("group {group} (key {key}): {} of {max} slots held\n", snapshot.leaders.len())
        }
        None => format!("group {group} (key {key}): no live slots\n"),
    };
    if snapshot.leaders.is_empty() {
        return out;
    }
    let holder_width =
        snapshot.leaders.iter().map(|s| s.holder.len()).max().unwrap_or(0).max("HOLDER".len());
    out.push_str(&format!(
        "{:<holder_width$}  {:>20}  {:<20}  {:>10}\n",
        "HOLDER", "FENCE", "ACQUIRED (UTC)", "EXPIRES IN"
    ));
    for slot in &snapshot.leaders {
        out.push_str(&format!(
            "{:<holder_width$}  {:>20}  {:<20}  {:>10}\n",
            slot.holder,
            slot.fence,
            humantime::format_rfc3339_seconds(slot.acquired_at).to_string(),
            seconds(slot.expires_in),
        ));
    }
    out
}

/// The state of `group` as JSON.
pub fn json(group: &str, key: &str, snapshot: &GroupSnapshot) -> serde_json::Value {
    let slots: Vec<serde_json::Value> = snapshot
        .leaders
        .iter()
        .map(|slot| {
            serde_json::json!({
                "holder": slot.holder,
                "fence": slot.fence,
                "acquired_at": humantime::format_rfc3339_millis(slot.acquired_at).to_string(),
                "expires_in_ms": slot.expires_in.as_millis() as u64,
            })
        })
        .collect();
    serde_json::json!({
        "group": group,
        "key": key,
        "max_leaders": snapshot.max_leaders,
        "active": snapshot.leaders.len(),
        "slots": slots,
    })
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}
