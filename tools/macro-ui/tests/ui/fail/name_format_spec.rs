use leader::leader_election;

// A format spec is fine; the argument must exist.
#[leader_election(name = "day-{day:02}")]
async fn padded(day: u32) {
    let _ = day;
}

#[leader_election(name = "day-{month:02}")]
async fn wrong(day: u32) {
    let _ = day;
}

fn main() {}
