//! Collecting several compile errors, so one build reports them all.

use proc_macro2::Span;

/// Errors found so far.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds an error at `span`.
    pub(crate) fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        self.add(syn::Error::new(span, message));
    }

    /// Adds an error (which may itself hold several).
    pub(crate) fn add(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// `Err` with every error, or `Ok` if there were none.
    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }
}
