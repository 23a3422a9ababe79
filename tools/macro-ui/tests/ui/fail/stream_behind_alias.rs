use std::pin::Pin;

use futures_util::stream::{self, Stream};
use leader::leader_election;

type Numbers = Pin<Box<dyn Stream<Item = u32> + Send>>;

#[leader_election(name = "numbers")]
async fn numbers() -> Numbers {
    Box::pin(stream::iter([1, 2, 3]))
}

fn main() {}
