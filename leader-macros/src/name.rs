//! The `name = "…"` template: literal text with `{argument}` placeholders.

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
    if text.is_empty() {
        return invalid("`name` must not be empty".to_owned());
    }
    if let Some(bad) = text.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return invalid(format!(
            "`name` must not contain whitespace or control characters (found {bad:?}); use `-` or `_`"
        ));
    }
    let mut placeholders = Vec::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return invalid("`name` has a `}` without a `{`".to_owned());
        }
        let Some(close) = rest[open..].find('}') else {
            return invalid("`name` has a `{` without a `}`".to_owned());
        };
        placeholders.push(rest[open + 1..open + close].to_owned());
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
