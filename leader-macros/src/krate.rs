//! Which path the generated code uses for the runtime crate.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

/// The runtime crate: the `crate = "…"` override if given; else `leader` under whatever
/// name the caller's Cargo.toml gives it; else `leader-core`; else `::leader`.
pub(crate) fn runtime_crate(override_path: Option<&syn::Path>) -> TokenStream {
    if let Some(path) = override_path {
        return quote!(#path);
    }
    for package in ["leader", "leader-core"] {
        match crate_name(package) {
            Ok(FoundCrate::Name(name)) => {
                let name = Ident::new(&name, Span::call_site());
                return quote!(::#name);
            }
            // The package's own tests and examples see it as an external crate.
            Ok(FoundCrate::Itself) => {
                let name = Ident::new(&package.replace('-', "_"), Span::call_site());
                return quote!(::#name);
            }
            Err(_) => {}
        }
    }
    quote!(::leader)
}
