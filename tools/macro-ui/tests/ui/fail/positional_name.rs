use leader::leader_election;

#[leader_election("nightly")]
async fn nightly() {}

fn main() {}
