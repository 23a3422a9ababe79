use leader::leader_group_election;

#[leader_group_election(name = "pool")]
async fn pool() {}

fn main() {}
