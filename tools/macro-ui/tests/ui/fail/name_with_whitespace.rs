use leader::leader_election;

#[leader_election(name = "nightly report")]
async fn job() {}

#[leader_election(name = "tab\there")]
async fn other_job() {}

fn main() {}
