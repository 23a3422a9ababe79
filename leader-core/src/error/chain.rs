//! [`error_chain`]: an error and its causes on one line.

#[cfg(doc)]
use super::Error;

/// `error` and its causes on one line, `outer: inner: …`, for a log line or a message to a
/// person; a cause whose text ends the line already (an error that shows its root cause,
/// as [`Error::Unavailable`] does, or a wrapper that repeats its cause) is left out.
///
/// ```
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// let error = leader_core::Error::Unavailable {
///     store: "redis",
///     endpoint: "redis://cache:6379".into(),
///     operation: "acquire",
///     cause: Box::new(std::io::Error::other(refused)),
/// };
/// assert_eq!(
///     leader_core::error_chain(&error),
///     "redis store at redis://cache:6379 unavailable during acquire: connection refused"
/// );
/// ```
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        let shown = text == cause_text || text.ends_with(&format!(": {cause_text}"));
        if !shown && !cause_text.is_empty() {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
