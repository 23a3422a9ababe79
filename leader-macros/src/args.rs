//! The macros' arguments: parsing, checking, and what each one means.

use std::time::Duration;

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit, LitStr, Token};

use leader_core::LeaderElectionOptions;

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

/// The arguments after checking.
pub(crate) struct Args {
    pub name: LitStr,
    pub max_leaders: u32,
    /// The election options as written, each named as its setter on the options type.
    pub settings: Vec<Setting>,
    pub store: Option<Expr>,
    pub skip_on_store_error: bool,
    pub krate: Option<syn::Path>,
}

/// One election option as written: `key` is both the argument's and the setter's name.
pub(crate) struct Setting {
    pub key: Ident,
    pub value: SettingValue,
    pub span: Span,
}

/// A checked option value.
pub(crate) enum SettingValue {
    Millis(u64),
    Flag(bool),
    Text(LitStr),
}

impl Setting {
    /// Applies this option with the runtime's own setter, as the expanded code will.
    fn apply(&self, options: LeaderElectionOptions) -> LeaderElectionOptions {
        match (self.key.to_string().as_str(), &self.value) {
            ("wait_time", SettingValue::Millis(ms)) => {
                options.wait_time(Duration::from_millis(*ms))
            }
            ("lease_time", SettingValue::Millis(ms)) => {
                options.lease_time(Duration::from_millis(*ms))
            }
            ("min_lease_time", SettingValue::Millis(ms)) => {
                options.min_lease_time(Duration::from_millis(*ms))
            }
            ("auto_extend", SettingValue::Flag(on)) => options.auto_extend(*on),
            ("holder_id", SettingValue::Text(text)) => options.holder_id(text.value()),
            _ => options,
        }
    }
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
        if input.peek(Lit) {
            let lit: Lit = input.parse()?;
            let hint = match &lit {
                Lit::Str(text) => format!("write `name = {:?}`", text.value()),
                _ => "write `key = value`, such as `lease_time = \"10s\"`".to_owned(),
            };
            return Err(syn::Error::new(
                lit.span(),
                format!("the arguments are `key = value` pairs, not bare values; {hint}"),
            ));
        }
        let key = if input.peek(Token![crate]) {
            let token: Token![crate] = input.parse()?;
            Ident::new("crate", token.span)
        } else {
            input.parse::<Ident>()?
        };
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            // Any expression parses, so that a constant or a call gets a message naming the
            // argument; only `store` takes one.
            match input.parse::<Expr>()? {
                Expr::Lit(lit) if key != "store" => Some(RawValue::Lit(lit.lit)),
                expr => Some(RawValue::Expr(Box::new(expr))),
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
        let mut settings = Vec::new();
        let (mut store, mut skip_on_store_error, mut krate) = (None, false, None);

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
                "name" => string(&key, value, "\"report-{tenant}\"").map(|lit| name = Some(lit)),
                "max_leaders" => integer(&key, value).map(|n| max_leaders = Some(n)),
                "wait_time" | "lease_time" | "min_lease_time" => duration(&key, value)
                    .map(|(ms, span)| settings.push(Setting { key: key.clone(), value: SettingValue::Millis(ms), span })),
                "auto_extend" => flag(&key, value)
                    .map(|on| settings.push(Setting { key: key.clone(), value: SettingValue::Flag(on), span: key.span() })),
                "holder_id" => string(&key, value, "\"worker-1\"")
                    .map(|lit| settings.push(Setting { key: key.clone(), span: lit.span(), value: SettingValue::Text(lit) })),
                "store" => match value {
                    Some(RawValue::Expr(expr)) => {
                        store = Some(*expr);
                        Ok(())
                    }
                    _ => Err(syn::Error::new(key.span(), "write `store = <expression>`, such as `store = self.store.clone()`")),
                },
                "on_store_error" => string(&key, value, "\"skip\"").and_then(|lit| match lit.value().as_str() {
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
                "crate" => string(&key, value, "\"leader\"").and_then(|lit| lit.parse::<syn::Path>().map(|path| krate = Some(path))),
                _ => unreachable_argument(&key),
            };
            if let Err(error) = result {
                errors.add(error);
            }
        }

        let call_site = Span::call_site();
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
        // The runtime's own rules (durations, minimum lease, renewal, holder id), checked
        // here with the runtime's own setters and validation, so compile time and run time
        // never disagree. An error points at the option it names (a `lease_time` left at its
        // default points at the attribute).
        let options = settings
            .iter()
            .fold(LeaderElectionOptions::new(), |options, setting| setting.apply(options));
        if let Err(error) = options.validate() {
            let span = match &error {
                leader_core::Error::InvalidOption { option, .. } => settings
                    .iter()
                    .find(|setting| setting.key == option)
                    .or_else(|| settings.iter().find(|setting| setting.key == "lease_time"))
                    .map_or(call_site, |setting| setting.span),
                _ => call_site,
            };
            errors.push(span, format!("{error} (checked at compile time)"));
        }
        errors.finish()?;
        Ok(Args { name, max_leaders, settings, store, skip_on_store_error, krate })
    }
}

fn unreachable_argument(key: &Ident) -> syn::Result<()> {
    Err(syn::Error::new(key.span(), "internal error: argument listed as valid but not handled"))
}

/// What was written where a literal belongs, for messages.
fn found(value: &RawValue) -> String {
    match value {
        RawValue::Lit(Lit::Str(_)) => "a string".to_owned(),
        RawValue::Lit(Lit::Int(_)) => "an integer".to_owned(),
        RawValue::Lit(Lit::Bool(_)) => "a bool".to_owned(),
        RawValue::Lit(_) => "another kind of literal".to_owned(),
        RawValue::Expr(expr) => format!(
            "the expression `{}`; the macro checks every value at compile time, so constants \
             and expressions are not accepted",
            quote::quote!(#expr).to_string().replace(" :: ", "::")
        ),
    }
}

fn string(key: &Ident, value: Option<RawValue>, example: &str) -> syn::Result<LitStr> {
    match value {
        Some(RawValue::Lit(Lit::Str(lit))) => Ok(lit),
        Some(other) => Err(syn::Error::new(
            other.span(),
            format!(
                "`{key}` takes a string literal, such as `{key} = {example}`; found {}",
                found(&other)
            ),
        )),
        None => {
            Err(syn::Error::new(key.span(), format!("`{key}` needs a value: `{key} = {example}`")))
        }
    }
}

/// An integer literal and where it was written.
fn integer(key: &Ident, value: Option<RawValue>) -> syn::Result<(u32, Span)> {
    match value {
        Some(RawValue::Lit(Lit::Int(lit))) => {
            lit.base10_parse::<u32>().map(|n| (n, lit.span())).map_err(|_| {
                syn::Error::new(
                    lit.span(),
                    format!("`{key}` takes a whole number from 1 to {}", u32::MAX),
                )
            })
        }
        Some(other) => Err(syn::Error::new(
            other.span(),
            format!(
                "`{key}` takes an integer literal, such as `{key} = 3`; found {}",
                found(&other)
            ),
        )),
        None => Err(syn::Error::new(key.span(), format!("`{key}` needs a value: `{key} = 3`"))),
    }
}

fn duration(key: &Ident, value: Option<RawValue>) -> syn::Result<(u64, Span)> {
    let lit = string(key, value, "\"10s\"")?;
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
            format!("`{key}` is a flag: `{key}` or `{key} = false`; found {}", found(&other)),
        )),
    }
}
