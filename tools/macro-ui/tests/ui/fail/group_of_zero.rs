use leader::leader_group_election;

#[leader_group_election(name = "pool", max_leaders = 0)]
async fn pool() {}

fn main() {}
