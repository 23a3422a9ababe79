use leader::leader_election;

const LEASE: &str = "10s";

#[leader_election(name = "job", lease_time = LEASE)]
async fn job() {}

fn main() {}
