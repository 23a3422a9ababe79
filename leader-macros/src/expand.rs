//! The expansion: the same function, returning `Result<LeaderRunResult<T>, Error>`, its body
//! run under a slot.

use std::collections::BTreeSet;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, ItemFn, Pat, PathArguments, ReturnType, Type, TypeParamBound};

use crate::args::{Args, Flavor};
use crate::errors::Errors;
use crate::krate::runtime_crate;
use crate::name::name_expression;

/// Expands one macro use; on any error, the original item is emitted beside the errors so
/// that the rest of the crate (and the IDE) still sees the function.
pub(crate) fn expand(flavor: Flavor, attribute: TokenStream, item: TokenStream) -> TokenStream {
    let expanded = syn::parse2::<ItemFn>(item.clone())
        .and_then(|function| expand_function(flavor, attribute, function));
    match expanded {
        Ok(expanded) => expanded,
        Err(error) => {
            let error = error.to_compile_error();
            quote!(#error #item)
        }
    }
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
    if let ReturnType::Type(_, ty) = &function.sig.output
        && is_stream(ty)
    {
        errors.push(
            ty.span(),
            format!(
                "{} cannot wrap a function that returns a stream: the slot would be released \
                     before the stream is consumed, and per-item lease extension is undefined",
                flavor.attribute()
            ),
        );
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

/// Whether `ty` is a stream: `impl Stream…`, `dyn Stream…`, `BoxStream…`, or one of those
/// inside `Pin<Box<…>>` and the like.
fn is_stream(ty: &Type) -> bool {
    let stream_bound = |bound: &TypeParamBound| match bound {
        TypeParamBound::Trait(bound) => bound.path.segments.last().is_some_and(|segment| {
            matches!(segment.ident.to_string().as_str(), "Stream" | "TryStream")
        }),
        _ => false,
    };
    match ty {
        Type::ImplTrait(ty) => ty.bounds.iter().any(stream_bound),
        Type::TraitObject(ty) => ty.bounds.iter().any(stream_bound),
        Type::Paren(ty) => is_stream(&ty.elem),
        Type::Group(ty) => is_stream(&ty.elem),
        Type::Path(ty) => ty.path.segments.last().is_some_and(|segment| {
            let boxed =
                matches!(segment.ident.to_string().as_str(), "BoxStream" | "LocalBoxStream");
            let wrapped = matches!(segment.ident.to_string().as_str(), "Pin" | "Box")
                && match &segment.arguments {
                    PathArguments::AngleBracketed(args) => args.args.iter().any(|arg| match arg {
                        GenericArgument::Type(inner) => is_stream(inner),
                        _ => false,
                    }),
                    _ => false,
                };
            boxed || wrapped
        }),
        _ => false,
    }
}

fn generate(args: Args, name: TokenStream, function: ItemFn) -> TokenStream {
    let krate = runtime_crate(args.krate.as_ref());
    let ItemFn { attrs, vis, mut sig, block } = function;
    let (output, output_span) = match &sig.output {
        ReturnType::Default => (quote!(()), sig.ident.span()),
        ReturnType::Type(_, ty) => (quote!(#ty), ty.span()),
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
    let holder_id = match &args.holder_id {
        Some(holder) => quote!(::core::option::Option::Some(#holder)),
        None => quote!(::core::option::Option::None),
    };
    let Args {
        max_leaders, wait_ms, lease_ms, min_lease_ms, auto_extend, skip_on_store_error, ..
    } = args;
    quote! {
        #(#attrs)*
        #vis #sig {
            let __leader_store: ::core::option::Option<::std::sync::Arc<dyn #krate::LeaseStore>> = #store;
            let __leader_name: ::std::string::String = #name;
            const __LEADER_OPTIONS: #krate::__private::MacroOptions = #krate::__private::MacroOptions {
                max_leaders: #max_leaders,
                wait_ms: #wait_ms,
                lease_ms: #lease_ms,
                min_lease_ms: #min_lease_ms,
                auto_extend: #auto_extend,
                holder_id: #holder_id,
                skip_on_store_error: #skip_on_store_error,
            };
            #krate::__private::run(__leader_store, &__LEADER_OPTIONS, &__leader_name, move |_| async move #block)
                .await
        }
    }
}
