use leader::leader_election;

#[leader_election(name = "job", max_leaders = 3)]
async fn job() {}

fn main() {}
