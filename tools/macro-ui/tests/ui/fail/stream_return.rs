use futures_util::stream::{self, Stream};
use leader::leader_election;

#[leader_election(name = "feed")]
async fn feed() -> impl Stream<Item = u32> {
    stream::iter([1, 2, 3])
}

fn main() {}
