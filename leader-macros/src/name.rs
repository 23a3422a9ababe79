//! The `name = "…"` template: literal text with `{argument}` placeholders, which may carry
//! a format spec (`{day:02}`), and `{{`/`}}` for literal braces, as `format!` reads them.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::LitStr;

/// Checks the template against the function's argument names and builds the expression
/// that makes the name at run time: the literal itself, or `format!` with the arguments.
pub(crate) fn name_expression(
    name: &LitStr,
    arguments: &BTreeSet<String>,
) -> syn::Result<TokenStream> {
    let text = name.value();
    let invalid = |message: String| Err(syn::Error::new(name.span(), message));
    // The runtime's name rule, checked with its own code (the arguments put in later must
    // keep to it too; that is checked when the fn is called).
    if let Err(error) = leader_core::__private::check_name(&text) {
        return invalid(format!("`name`: {error}"));
    }
    let mut placeholders = Vec::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with("{{") || rest[open..].starts_with("}}") {
            rest = &rest[open + 2..];
            continue;
        }
        if rest[open..].starts_with('}') {
            return invalid(
                "`name` has a `}` without a `{` (write `}}` for a literal one)".to_owned(),
            );
        }
        let Some(close) = rest[open..].find('}') else {
            return invalid(
                "`name` has a `{` without a `}` (write `{{` for a literal one)".to_owned(),
            );
        };
        let inside = &rest[open + 1..open + close];
        // `{day:02}`: the argument, then a format spec for `format!`.
        let argument = inside.split_once(':').map_or(inside, |(argument, _)| argument);
        if argument.is_empty() {
            return invalid(format!(
                "`{{{inside}}}` in `name` names no argument; name the one to interpolate, such \
                 as `{{tenant}}`"
            ));
        }
        if argument.chars().all(|c| c.is_ascii_digit()) {
            return invalid(format!(
                "`{{{inside}}}` in `name` is positional; name the argument instead, such as \
                 `{{tenant}}`"
            ));
        }
        placeholders.push(argument.to_owned());
        rest = &rest[open + close + 1..];
    }
    for placeholder in &placeholders {
        if !arguments.contains(placeholder) {
            let known = if arguments.is_empty() {
                "the function has no named arguments".to_owned()
            } else {
                format!(
                    "its arguments are: {}",
                    arguments.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            };
            return invalid(format!(
                "`{{{placeholder}}}` in `name` is not an argument of this function; {known}"
            ));
        }
    }
    let span = name.span();
    Ok(if placeholders.is_empty() {
        quote_spanned!(span=> ::std::string::String::from(#name))
    } else {
        quote_spanned!(span=> ::std::format!(#name))
    })
}
