use leader::leader_election;

#[leader_election(name = "job", wait_time = "10 parsecs", lease_time = "P1M")]
async fn job() {}

fn main() {}
