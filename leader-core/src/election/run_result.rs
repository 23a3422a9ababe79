//! [`LeaderRunResult`]: whether a body ran.

/// The outcome of `run_if_leader`: the body's value if a slot was won, or `Skipped`.
///
/// Contention is not an error: a full group gives `Skipped`. Store failures are the `Err`
/// of the surrounding `Result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a `Skipped` result means the body did not run"]
pub enum LeaderRunResult<T> {
    /// A slot was won and the body ran to completion, giving this value.
    Elected(T),
    /// No slot became free within `wait_time`; the body did not run.
    Skipped,
}

impl<T> LeaderRunResult<T> {
    /// Whether the body ran.
    pub fn is_elected(&self) -> bool {
        matches!(self, LeaderRunResult::Elected(_))
    }

    /// Whether no slot was free.
    pub fn is_skipped(&self) -> bool {
        matches!(self, LeaderRunResult::Skipped)
    }

    /// The body's value, if it ran.
    ///
    /// ```
    /// use leader_core::LeaderRunResult;
    /// assert_eq!(LeaderRunResult::Elected(7).elected(), Some(7));
    /// assert_eq!(LeaderRunResult::<i32>::Skipped.elected(), None);
    /// ```
    pub fn elected(self) -> Option<T> {
        match self {
            LeaderRunResult::Elected(value) => Some(value),
            LeaderRunResult::Skipped => None,
        }
    }

    /// Maps the body's value, keeping `Skipped`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> LeaderRunResult<U> {
        match self {
            LeaderRunResult::Elected(value) => LeaderRunResult::Elected(f(value)),
            LeaderRunResult::Skipped => LeaderRunResult::Skipped,
        }
    }
}
