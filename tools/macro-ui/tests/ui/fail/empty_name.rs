use leader::leader_election;

#[leader_election(name = "")]
async fn job() {}

fn main() {}
