//! Attribute macros of the [`leader`](https://docs.rs/leader) crate, which re-exports them:
//! `#[leader_election]` and `#[leader_group_election]` make an async fn run only on the
//! candidates that win a slot.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod args;
mod duration;
mod errors;
mod expand;
mod krate;
mod name;

use proc_macro::TokenStream;

use args::Flavor;

// Not when rustdoc collects doctests: the examples need `leader`, and run as its doctests.
#[cfg_attr(not(doctest), doc = include_str!("../docs/leader_election.md"))]
#[proc_macro_attribute]
pub fn leader_election(attribute: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Flavor::Single, attribute.into(), item.into()).into()
}

// Not when rustdoc collects doctests: the examples need `leader`, and run as its doctests.
#[cfg_attr(not(doctest), doc = include_str!("../docs/leader_group_election.md"))]
#[proc_macro_attribute]
pub fn leader_group_election(attribute: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(Flavor::Group, attribute.into(), item.into()).into()
}
