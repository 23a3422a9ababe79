use leader::leader_election;

#[leader_election(name = "job", lease_time = "10s", min_lease_time = "1m")]
async fn job() {}

fn main() {}
