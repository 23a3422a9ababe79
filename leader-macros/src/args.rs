//! The macros' arguments: parsing, checking, and what each one means.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit, LitStr, Token};

use crate::duration::parse_millis;
use crate::errors::Errors;

/// Which macro is being expanded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    Single,
    Group,
}

impl Flavor {
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Flavor::Single => "#[leader_election]",
            Flavor::Group => "#[leader_group_election]",
        }
    }

    /// The arguments this macro takes: all of them, less `max_leaders` for a single leader.
    fn valid_arguments(self) -> Vec<&'static str> {
        const ALL: &[&str] = &[
            "name",
            "max_leaders",
            "wait_time",
            "lease_time",
            "min_lease_time",
            "auto_extend",
            "holder_id",
            "store",
            "on_store_error",
            "crate",
        ];
        ALL.iter().copied().filter(|arg| self == Flavor::Group || *arg != "max_leaders").collect()
    }
}

/// The runtime's default lease time, in milliseconds.
const DEFAULT_LEASE_MS: u64 = 30_000;

/// The arguments after checking.
pub(crate) struct Args {
    pub name: LitStr,
    pub max_leaders: u32,
    pub wait_ms: u64,
    pub lease_ms: u64,
    pub min_lease_ms: u64,
    pub auto_extend: bool,
    pub holder_id: Option<LitStr>,
    pub store: Option<Expr>,
    pub skip_on_store_error: bool,
    pub krate: Option<syn::Path>,
}

/// One `key` or `key = value` as written.
struct RawArg {
    key: Ident,
    value: Option<RawValue>,
}

enum RawValue {
    Lit(Lit),
    Expr(Box<Expr>),
}

impl RawValue {
    fn span(&self) -> Span {
        match self {
            RawValue::Lit(lit) => lit.span(),
            RawValue::Expr(expr) => expr.span(),
        }
    }
}

impl Parse for RawArg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key = if input.peek(Token![crate]) {
            let token: Token![crate] = input.parse()?;
            Ident::new("crate", token.span)
        } else {
            input.parse::<Ident>()?
        };
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            if key == "store" {
                Some(RawValue::Expr(Box::new(input.parse()?)))
            } else {
                Some(RawValue::Lit(input.parse()?))
            }
        } else {
            None
        };
        Ok(RawArg { key, value })
    }
}

impl Args {
    /// Parses and checks the attribute's arguments for `flavor`.
    pub(crate) fn parse(tokens: proc_macro2::TokenStream, flavor: Flavor) -> syn::Result<Args> {
        let raw =
            syn::parse::Parser::parse2(Punctuated::<RawArg, Token![,]>::parse_terminated, tokens)?;
        let mut errors = Errors::default();
        let mut seen: Vec<String> = Vec::new();
        let mut name = None;
        let mut max_leaders = None;
        let (mut wait_ms, mut lease_ms, mut min_lease_ms) = (0, None, None);
        let mut auto_extend = false;
        let (mut holder_id, mut store, mut skip_on_store_error, mut krate) =
            (None, None, false, None);

        for RawArg { key, value } in raw {
            let key_name = key.to_string();
            if key_name == "max_leaders" && flavor == Flavor::Single {
                errors.push(
                    key.span(),
                    "`max_leaders` belongs to #[leader_group_election]; #[leader_election] always \
                     elects one leader",
                );
                continue;
            }
            if !flavor.valid_arguments().contains(&key_name.as_str()) {
                errors.push(
                    key.span(),
                    format!(
                        "unknown argument `{key_name}` for {}; valid arguments are: {}",
                        flavor.attribute(),
                        flavor.valid_arguments().join(", ")
                    ),
                );
                continue;
            }
            if seen.contains(&key_name) {
                errors.push(key.span(), format!("`{key_name}` set multiple times"));
                continue;
            }
            seen.push(key_name.clone());
            let result = match key_name.as_str() {
                "name" => string(&key, value).map(|lit| name = Some(lit)),
                "max_leaders" => integer(&key, value).map(|n| max_leaders = Some((n, key.span()))),
                "wait_time" => duration(&key, value).map(|(ms, _)| wait_ms = ms),
                "lease_time" => duration(&key, value).map(|d| lease_ms = Some(d)),
                "min_lease_time" => duration(&key, value).map(|d| min_lease_ms = Some(d)),
                "auto_extend" => flag(&key, value).map(|on| auto_extend = on),
                "holder_id" => string(&key, value).and_then(|lit| check_holder(lit).map(|lit| holder_id = Some(lit))),
                "store" => match value {
                    Some(RawValue::Expr(expr)) => {
                        store = Some(*expr);
                        Ok(())
                    }
                    _ => Err(syn::Error::new(key.span(), "write `store = <expression>`, such as `store = self.store.clone()`")),
                },
                "on_store_error" => string(&key, value).and_then(|lit| match lit.value().as_str() {
                    "error" => Ok(()),
                    "skip" => {
                        skip_on_store_error = true;
                        Ok(())
                    }
                    other => Err(syn::Error::new(
                        lit.span(),
                        format!("`on_store_error` is \"error\" (the default) or \"skip\", not {other:?}"),
                    )),
                }),
                "crate" => string(&key, value).and_then(|lit| lit.parse::<syn::Path>().map(|path| krate = Some(path))),
                _ => unreachable_argument(&key),
            };
            if let Err(error) = result {
                errors.add(error);
            }
        }

        let call_site = Span::call_site();
        let lease = lease_ms.unwrap_or((DEFAULT_LEASE_MS, call_site));
        if lease.0 == 0 {
            errors.push(lease.1, "`lease_time` must be longer than zero");
        }
        if let Some((min, span)) = min_lease_ms
            && min > lease.0
        {
            errors.push(
                span,
                format!(
                    "`min_lease_time` ({min} ms) must not exceed `lease_time` ({} ms)",
                    lease.0
                ),
            );
        }
        if auto_extend && lease.0 > 0 && lease.0 < 3 {
            errors.push(lease.1, "with `auto_extend`, `lease_time` must be at least 3ms (renewal every lease_time / 3)");
        }
        let max_leaders = match (flavor, max_leaders) {
            (Flavor::Single, _) => 1,
            (Flavor::Group, None) => {
                errors.push(
                    call_site,
                    "#[leader_group_election] needs `max_leaders = N` with N >= 2; for one leader use \
                     #[leader_election]",
                );
                0
            }
            (Flavor::Group, Some((n, span))) if n < 2 => {
                errors.push(
                    span,
                    format!(
                        "`max_leaders = {n}`: a group needs at least 2 slots; for one leader use \
                         #[leader_election]"
                    ),
                );
                n
            }
            (Flavor::Group, Some((n, _))) => n,
        };
        let Some(name) = name else {
            errors.push(
                call_site,
                format!("{} needs `name = \"…\"`, the group's name", flavor.attribute()),
            );
            return Err(errors
                .finish()
                .err()
                .unwrap_or_else(|| syn::Error::new(call_site, "missing `name`")));
        };
        errors.finish()?;
        Ok(Args {
            name,
            max_leaders,
            wait_ms,
            lease_ms: lease.0,
            min_lease_ms: min_lease_ms.map_or(0, |(ms, _)| ms),
            auto_extend,
            holder_id,
            store,
            skip_on_store_error,
            krate,
        })
    }
}

fn unreachable_argument(key: &Ident) -> syn::Result<()> {
    Err(syn::Error::new(key.span(), "internal error: argument listed as valid but not handled"))
}

fn string(key: &Ident, value: Option<RawValue>) -> syn::Result<LitStr> {
    match value {
        Some(RawValue::Lit(Lit::Str(lit))) => Ok(lit),
        Some(other) => {
            Err(syn::Error::new(other.span(), format!("`{key}` takes a string literal")))
        }
        None => Err(syn::Error::new(key.span(), format!("`{key}` needs a value: `{key} = \"…\"`"))),
    }
}

fn integer(key: &Ident, value: Option<RawValue>) -> syn::Result<u32> {
    match value {
        Some(RawValue::Lit(Lit::Int(lit))) => lit.base10_parse::<u32>(),
        Some(other) => {
            Err(syn::Error::new(other.span(), format!("`{key}` takes an integer literal")))
        }
        None => Err(syn::Error::new(key.span(), format!("`{key}` needs a value: `{key} = 3`"))),
    }
}

fn duration(key: &Ident, value: Option<RawValue>) -> syn::Result<(u64, Span)> {
    let lit = string(key, value)?;
    parse_millis(&lit.value())
        .map(|ms| (ms, lit.span()))
        .map_err(|message| syn::Error::new(lit.span(), message))
}

fn flag(key: &Ident, value: Option<RawValue>) -> syn::Result<bool> {
    match value {
        None => Ok(true),
        Some(RawValue::Lit(Lit::Bool(lit))) => Ok(lit.value),
        Some(other) => Err(syn::Error::new(
            other.span(),
            format!("`{key}` is a flag: `{key}` or `{key} = false`"),
        )),
    }
}

fn check_holder(lit: LitStr) -> syn::Result<LitStr> {
    let text = lit.value();
    if text.is_empty() || text.len() > 256 || text.chars().any(char::is_control) {
        return Err(syn::Error::new(
            lit.span(),
            "`holder_id` must be 1 to 256 bytes with no control characters",
        ));
    }
    Ok(lit)
}
