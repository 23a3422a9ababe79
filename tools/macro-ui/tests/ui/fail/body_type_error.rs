use leader::leader_election;

// A type error in the body is reported in the body, not on the attribute.
#[leader_election(name = "count")]
async fn count() -> u32 {
    let n = 3;
    "three"
}

fn main() {}
