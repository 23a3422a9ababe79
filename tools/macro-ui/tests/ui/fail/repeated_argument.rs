use leader::leader_group_election;

#[leader_group_election(name = "job", max_leaders = 2, lease_time = "10s", lease_time = "20s")]
async fn job() {}

fn main() {}
