use leader::leader_election;

#[leader_election(name = "job", on_store_error = "ignore")]
async fn job() {}

fn main() {}
