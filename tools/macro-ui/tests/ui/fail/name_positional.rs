use leader::leader_election;

#[leader_election(name = "day-{0}")]
async fn positional(day: u32) {
    let _ = day;
}

#[leader_election(name = "day-{}")]
async fn empty(day: u32) {
    let _ = day;
}

fn main() {}
