//! docs/reliability.md states what the lab runs: its first table of results lists every
//! scenario the lab has, by name and in the lab's order (so a scenario added or removed
//! without its row fails here), and every other table lists only scenarios the lab has, in
//! its order.

use leader_chaos::scenario::SCENARIOS;

#[test]
fn every_results_table_lists_exactly_the_labs_scenarios() {
    let page = include_str!("../../../docs/reliability.md");
    let names: Vec<&str> = SCENARIOS.iter().map(|scenario| scenario.name).collect();
    let mut tables = 0;
    let mut current: Option<Vec<&str>> = None;
    for line in page.lines().chain(std::iter::once("")) {
        if line.starts_with("| scenario |") {
            current = Some(Vec::new());
        } else if let Some(rows) = current.as_mut() {
            if line.starts_with("|---") {
                continue;
            }
            match line.strip_prefix("| ").and_then(|row| row.split(" | ").next()) {
                Some(name) => rows.push(name),
                None => {
                    if tables == 0 {
                        assert_eq!(rows, &names, "the first table of docs/reliability.md");
                    } else {
                        let mut lab = names.iter();
                        for row in rows.iter() {
                            assert!(
                                lab.any(|name| name == row),
                                "table {}: `{row}` is not a scenario of the lab, or out of its order",
                                tables + 1
                            );
                        }
                    }
                    tables += 1;
                    current = None;
                }
            }
        }
    }
    assert!(tables >= 1, "no results table in docs/reliability.md");
}
