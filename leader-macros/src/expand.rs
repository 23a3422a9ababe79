//! The expansion: the same function, returning `Result<LeaderRunResult<T>, Error>`, its body
//! run under a slot.

use std::collections::BTreeSet;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    FnArg, GenericArgument, ItemFn, Pat, PathArguments, ReturnType, Token, Type, TypeParamBound,
};

use crate::args::{Args, Flavor, Setting, SettingValue};
use crate::errors::Errors;
use crate::krate::runtime_crate;
use crate::name::name_expression;

/// Expands one macro use; on any error, the original item is emitted beside the errors so
/// that the rest of the crate (and the IDE) still sees the function.
pub(crate) fn expand(flavor: Flavor, attribute: TokenStream, item: TokenStream) -> TokenStream {
    let expanded = parse_function(flavor, item.clone())
        .and_then(|function| expand_function(flavor, attribute, function));
    match expanded {
        Ok(expanded) => expanded,
        Err(error) => {
            let error = error.to_compile_error();
            quote!(#error #item)
        }
    }
}

/// The wrapped item, which must be a fn with a body.
fn parse_function(flavor: Flavor, item: TokenStream) -> syn::Result<ItemFn> {
    if let Ok(function) = syn::parse2::<ItemFn>(item.clone()) {
        return Ok(function);
    }
    let found = match syn::parse2::<syn::Item>(item.clone()) {
        Ok(syn::Item::Struct(_)) => "a struct",
        Ok(syn::Item::Enum(_)) => "an enum",
        Ok(syn::Item::Impl(_)) => "an impl block; put it on each async fn inside",
        Ok(syn::Item::Trait(_)) => "a trait",
        Ok(syn::Item::Mod(_)) => "a module",
        Ok(syn::Item::Const(_) | syn::Item::Static(_)) => "a constant",
        _ if syn::parse2::<syn::TraitItemFn>(item.clone()).is_ok() => {
            "a fn without a body (a trait's declaration); put it on the implementation"
        }
        _ => "something other than a fn",
    };
    let span = item.into_iter().next().map_or_else(Span::call_site, |token| token.span());
    Err(syn::Error::new(
        span,
        format!("{} wraps an `async fn` with a body, not {found}", flavor.attribute()),
    ))
}

fn expand_function(
    flavor: Flavor,
    attribute: TokenStream,
    function: ItemFn,
) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    if function.sig.asyncness.is_none() {
        errors.push(
            function.sig.fn_token.span(),
            format!("{} wraps an `async fn`; add `async` before `fn`", flavor.attribute()),
        );
    }
    if let ReturnType::Type(_, ty) = &function.sig.output {
        match deferred_kind(ty) {
            Some(Deferred::Stream) => errors.push(
                ty.span(),
                format!(
                    "{} cannot wrap a function that returns a stream: the slot would be \
                     released before the stream is consumed, and per-item lease extension is \
                     undefined; collect the items inside the body instead",
                    flavor.attribute()
                ),
            ),
            Some(Deferred::Future) => errors.push(
                ty.span(),
                format!(
                    "{} cannot wrap a function that returns a future: the slot would be \
                     released before the returned future runs; `.await` it inside the body \
                     instead",
                    flavor.attribute()
                ),
            ),
            None => {}
        }
    }
    let args = Args::parse(attribute, flavor).map_err(|error| errors.add(error)).ok();
    let name = args.as_ref().and_then(|args| {
        name_expression(&args.name, &argument_names(&function))
            .map_err(|error| errors.add(error))
            .ok()
    });
    errors.finish()?;
    match (args, name) {
        (Some(args), Some(name)) => Ok(generate(args, name, function)),
        _ => {
            Err(syn::Error::new(Span::call_site(), "internal error: arguments lost after checking"))
        }
    }
}

/// The names of the function's plain `name: Type` arguments, which `name` may interpolate.
fn argument_names(function: &ItemFn) -> BTreeSet<String> {
    function
        .sig
        .inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(pat) => Some(pat.ident.to_string()),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect()
}

/// A return value that runs after the fn returned, and so after the slot was released.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Deferred {
    Future,
    Stream,
}

/// What `ty`, as written, defers: `impl Stream…`, `dyn Future…`, `BoxStream…`,
/// `BoxFuture…`, or one of those inside `Pin<Box<…>>` and the like. Types behind another
/// name are caught by the trait check of the expansion instead.
fn deferred_kind(ty: &Type) -> Option<Deferred> {
    let kind_of = |name: &str| match name {
        "Stream" | "TryStream" | "BoxStream" | "LocalBoxStream" => Some(Deferred::Stream),
        "Future" | "TryFuture" | "IntoFuture" | "BoxFuture" | "LocalBoxFuture" => {
            Some(Deferred::Future)
        }
        _ => None,
    };
    let bound_kind = |bound: &TypeParamBound| match bound {
        TypeParamBound::Trait(bound) => {
            bound.path.segments.last().and_then(|segment| kind_of(&segment.ident.to_string()))
        }
        _ => None,
    };
    match ty {
        Type::ImplTrait(ty) => ty.bounds.iter().find_map(bound_kind),
        Type::TraitObject(ty) => ty.bounds.iter().find_map(bound_kind),
        Type::Paren(ty) => deferred_kind(&ty.elem),
        Type::Group(ty) => deferred_kind(&ty.elem),
        Type::Path(ty) => ty.path.segments.last().and_then(|segment| {
            let name = segment.ident.to_string();
            let boxed =
                kind_of(&name).filter(|_| name.starts_with("Box") || name.starts_with("LocalBox"));
            let wrapped = || match (&segment.arguments, name.as_str()) {
                (PathArguments::AngleBracketed(args), "Pin" | "Box") => {
                    args.args.iter().find_map(|arg| match arg {
                        GenericArgument::Type(inner) => deferred_kind(inner),
                        _ => None,
                    })
                }
                _ => None,
            };
            boxed.or_else(wrapped)
        }),
        _ => None,
    }
}

/// `ty` with every `impl Trait` replaced by `_`, so it can annotate a `let` (as tracing's
/// `#[instrument]` does).
fn erase_impl_trait(ty: &Type) -> Type {
    struct Eraser;
    impl syn::visit_mut::VisitMut for Eraser {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(impl_trait) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: Token![_](impl_trait.impl_token.span),
                });
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut erased = ty.clone();
    syn::visit_mut::VisitMut::visit_type_mut(&mut Eraser, &mut erased);
    erased
}

fn generate(args: Args, name: TokenStream, function: ItemFn) -> TokenStream {
    let krate = runtime_crate(args.krate.as_ref());
    let ItemFn { attrs, vis, mut sig, block } = function;
    let (output, output_span) = match &sig.output {
        ReturnType::Default => (quote!(()), sig.ident.span()),
        ReturnType::Type(_, ty) => (quote!(#ty), ty.span()),
    };
    // The declared return type is the body's expected type: a `return` of that type
    // (never reached) fixes the async block's output before the body is checked, so the
    // body's value coerces (`&String` to `&str`, `Box<T>` to `Box<dyn Trait>`) and a type
    // error points into the body.
    let expected = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) => {
            let erased = erase_impl_trait(ty);
            quote!(#erased)
        }
    };
    let expected_return = quote_spanned! {output_span=>
        #[allow(
            unknown_lints, unreachable_code, clippy::diverging_sub_expression,
            clippy::let_unit_value, clippy::unreachable, clippy::let_with_type_underscore,
            clippy::empty_loop
        )]
        if false {
            let __leader_expected_return: #expected = loop {};
            return __leader_expected_return;
        }
    };
    // A future or stream behind another name (a type alias, a boxed trait object) is
    // refused by its type: the check is ambiguous, so an error, exactly when it is one.
    let no_deferred_value = quote_spanned! {output_span=>
        #krate::__private::a_wrapped_fn_must_not_return_a_future_or_stream(&__leader_result);
    };
    sig.output = syn::parse_quote_spanned! {output_span=>
        -> ::core::result::Result<#krate::LeaderRunResult<#output>, #krate::Error>
    };
    let store = match &args.store {
        Some(expr) => quote_spanned! {expr.span()=>
            ::core::option::Option::Some(#krate::__private::shared_store(#expr))
        },
        None => quote!(::core::option::Option::None),
    };
    let settings = args.settings.iter().map(|Setting { key, value, .. }| {
        let value = match value {
            SettingValue::Millis(ms) => quote!(::core::time::Duration::from_millis(#ms)),
            SettingValue::Flag(on) => quote!(#on),
            SettingValue::Text(text) => quote!(#text),
        };
        quote!(.#key(#value))
    });
    let Args { max_leaders, skip_on_store_error, .. } = args;
    quote! {
        #(#attrs)*
        #vis #sig {
            let __leader_store: ::core::option::Option<::std::sync::Arc<dyn #krate::LeaseStore>> = #store;
            let __leader_name: ::std::string::String = #name;
            let __leader_options = #krate::LeaderGroupElectionOptions::new(#max_leaders) #(#settings)*;
            let __leader_result = #krate::__private::run(
                __leader_store,
                __leader_options,
                #skip_on_store_error,
                &__leader_name,
                move |_| async move {
                    #expected_return
                    #block
                },
            )
            .await;
            #no_deferred_value
            __leader_result
        }
    }
}
