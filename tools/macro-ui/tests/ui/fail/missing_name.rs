use leader::leader_election;

#[leader_election(lease_time = "10s")]
async fn job() {}

fn main() {}
