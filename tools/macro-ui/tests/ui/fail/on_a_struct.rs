use leader::leader_election;

#[leader_election(name = "job")]
struct Job;

fn main() {}
