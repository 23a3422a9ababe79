//! Every body that compiles as a plain `async fn` compiles under the macro: the declared
//! return type is the body's expected type, so coercions happen as they would without it.
use std::fmt::Display;

use leader::{LeaderRunResult, MemoryStore, leader_election, leader_group_election};

struct Report {
    title: String,
    store: MemoryStore,
}

impl Report {
    // &String -> &str (deref coercion), borrowing from self.
    #[leader_election(name = "title", store = self.store.clone())]
    async fn title(&self) -> &str {
        &self.title
    }
}

// Unsizing: Box<i32> -> Box<dyn Display + Send>.
#[leader_election(name = "render", store = MemoryStore::new())]
async fn render() -> Box<dyn Display + Send> {
    Box::new(5)
}

// Unsizing inside a collection, with an early return.
#[leader_group_election(name = "handlers", max_leaders = 2, store = MemoryStore::new())]
async fn handlers(none: bool) -> Vec<Box<dyn Fn() -> u32 + Send>> {
    if none {
        return Vec::new();
    }
    vec![Box::new(|| 1)]
}

// An opaque return type that is neither a future nor a stream.
#[leader_election(name = "shown", store = MemoryStore::new())]
async fn shown() -> impl Display {
    "shown"
}

// A slice from an array reference.
#[leader_election(name = "numbers", store = MemoryStore::new())]
async fn numbers() -> &'static [u32] {
    &[1, 2, 3]
}

#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), leader::Error> {
    let report = Report { title: "weekly".to_owned(), store: MemoryStore::new() };
    assert_eq!(report.title().await?, LeaderRunResult::Elected("weekly"));
    let LeaderRunResult::Elected(rendered) = render().await? else { panic!("skipped") };
    assert_eq!(rendered.to_string(), "5");
    let LeaderRunResult::Elected(list) = handlers(false).await? else { panic!("skipped") };
    assert_eq!(list[0](), 1);
    let LeaderRunResult::Elected(shown) = shown().await? else { panic!("skipped") };
    assert_eq!(shown.to_string(), "shown");
    assert_eq!(numbers().await?, LeaderRunResult::Elected(&[1u32, 2, 3][..]));
    Ok(())
}
