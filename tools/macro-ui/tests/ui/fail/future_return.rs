use std::future::Future;

use leader::leader_election;

#[leader_election(name = "deferred")]
async fn deferred() -> impl Future<Output = bool> {
    async { true }
}

fn main() {}
