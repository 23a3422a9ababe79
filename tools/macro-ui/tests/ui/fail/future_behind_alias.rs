use std::future::Future;
use std::pin::Pin;

use leader::leader_group_election;

type Later = Pin<Box<dyn Future<Output = u32> + Send>>;

#[leader_group_election(name = "later", max_leaders = 2)]
async fn later() -> Later {
    Box::pin(async { 1 })
}

fn main() {}
