use leader::leader_election;

#[leader_election(name = "job", lease = "10s")]
async fn job() {}

fn main() {}
