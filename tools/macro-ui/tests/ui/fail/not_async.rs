use leader::leader_election;

#[leader_election(name = "sync")]
fn not_async() -> u32 {
    1
}

fn main() {
    let _ = not_async();
}
