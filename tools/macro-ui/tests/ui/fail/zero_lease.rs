use leader::leader_election;

#[leader_election(name = "job", lease_time = "0s")]
async fn job() {}

fn main() {}
