//! [`Members`]: one etcd client per member, the member calls go to, and how a failure is
//! classed: a member that is down, cut off from its peers or without a leader is left for the
//! next one, within the operation's deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::sync::OnceCell;

use super::failures::{classify, never_taken, permanent};
use crate::backoff::MEMBER_RETRY_PAUSE;
use crate::error::Error;
use crate::store::bound::{Bound, Failed, Then};
use crate::store::class::Class;

/// How the store reaches its cluster.
pub(crate) struct Members {
    endpoints: Vec<String>,
    command_timeout: Duration,
    options: ConnectOptions,
    /// One client per endpoint, each made on its first use (a client with credentials
    /// authenticates when it is made), so a member down at start does not stop the others.
    clients: Vec<OnceCell<Client>>,
    /// The member calls go to first; moved on after a transient failure.
    preferred: AtomicUsize,
}

impl Members {
    pub(crate) fn new(
        endpoints: Vec<String>,
        options: ConnectOptions,
        command_timeout: Duration,
    ) -> Self {
        Members {
            clients: endpoints.iter().map(|_| OnceCell::new()).collect(),
            endpoints,
            command_timeout,
            options,
            preferred: AtomicUsize::new(0),
        }
    }

    /// The deadline of one `operation`: the command timeout from now.
    pub(crate) fn bound(&self, operation: &'static str) -> Bound {
        Bound::new("etcd", operation, self.command_timeout)
    }

    /// The endpoints, for `Debug` and errors.
    pub(crate) fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The client of the preferred member (made now if it is its first use), and its index.
    async fn client(&self, bound: &Bound) -> (usize, Result<Client, Error>) {
        let index = self.preferred.load(Ordering::Relaxed) % self.endpoints.len().max(1);
        let made = self.clients[index].get_or_try_init(|| async {
            let endpoint = self.endpoints[index].as_str();
            let connect = Client::connect([endpoint], Some(self.options.clone()));
            match bound.run(connect).await? {
                Ok(client) => Ok(client),
                Err(error) => Err(self.to_error(bound.operation(), error)),
            }
        });
        (index, made.await.cloned())
    }

    /// The member calls go to now.
    pub(crate) fn preferred(&self) -> usize {
        self.preferred.load(Ordering::Relaxed) % self.endpoints.len().max(1)
    }

    /// How many members there are.
    pub(crate) fn count(&self) -> usize {
        self.endpoints.len().max(1)
    }

    /// Moves calls on from member `failed` to the next one (unless another call did already).
    pub(crate) fn leave(&self, failed: usize) {
        let next = (failed + 1) % self.endpoints.len().max(1);
        let _ = self.preferred.compare_exchange(failed, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Runs `call` on the preferred member within `bound`; after a transient failure, on the
    /// next member (after [`MEMBER_RETRY_PAUSE`], doubling), until the deadline. Each
    /// attempt has an equal share of the time left among the members not tried yet, so a
    /// member that does not answer at all (dead, paused, cut off) leaves time for the
    /// others. Every call made through here must be safe to make twice: reads, keep-alives,
    /// revocations.
    pub(crate) async fn call<T, F>(
        &self,
        bound: &Bound,
        call: impl Fn(Client) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_with(bound, true, call).await
    }

    /// [`call`](Self::call) for a transaction that writes: it moves to the next member after
    /// a refusal (the member did not take it), but not after an attempt that got no answer
    /// in its share of the time, which may still commit later; that attempt's
    /// [`Error::Timeout`] goes to the caller, which revokes the transaction's lease before
    /// it tries again.
    pub(crate) async fn call_write<T, F>(
        &self,
        bound: &Bound,
        call: impl Fn(Client) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_with(bound, false, call).await
    }

    async fn call_with<T, F>(
        &self,
        bound: &Bound,
        resend_unanswered: bool,
        call: impl Fn(Client) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        bound
            .retry(MEMBER_RETRY_PAUSE, |tries| {
                let call = &call;
                async move {
                    let (member, client) = self.client(bound).await;
                    let endpoint = &self.endpoints[member];
                    let client = client.map_err(|error| {
                        if !error.is_transient() {
                            return Failed::stop(error);
                        }
                        tracing::debug!(operation = bound.operation(), %endpoint, %error, "etcd member unreachable");
                        self.leave(member);
                        Failed { error, then: Then::AfterPause }
                    })?;
                    // An equal share of the time left for each member not tried yet.
                    let untried = self.count().saturating_sub(tries.made as usize).max(1);
                    let share = bound.left() / u32::try_from(untried).unwrap_or(u32::MAX);
                    let error = match bound.run(tokio::time::timeout(share, call(client))).await {
                        Ok(Ok(Ok(value))) => return Ok(value),
                        Ok(Ok(Err(error))) => error,
                        Ok(Err(_)) if resend_unanswered => {
                            tracing::debug!(operation = bound.operation(), %endpoint, "etcd member did not answer");
                            self.leave(member);
                            return Err(Failed { error: bound.timed_out(), then: Then::AtOnce });
                        }
                        Ok(Err(_)) | Err(_) => {
                            self.leave(member);
                            return Err(Failed::stop(bound.timed_out()));
                        }
                    };
                    match classify(&error) {
                        Class::Permanent => Err(Failed::stop(permanent(bound.operation(), &error))),
                        _ => {
                            tracing::debug!(operation = bound.operation(), %endpoint, %error, "etcd member failed");
                            self.leave(member);
                            let resend = resend_unanswered || never_taken(&error);
                            let then = if resend { Then::AfterPause } else { Then::Stop };
                            Err(Failed { error: self.unavailable(bound.operation(), error), then })
                        }
                    }
                }
            })
            .await
    }

    /// The error of a failed call.
    pub(crate) fn to_error(&self, operation: &'static str, error: etcd_client::Error) -> Error {
        match classify(&error) {
            Class::Permanent => permanent(operation, &error),
            _ => self.unavailable(operation, error),
        }
    }

    fn unavailable(&self, operation: &'static str, error: etcd_client::Error) -> Error {
        Error::Unavailable {
            store: "etcd",
            endpoint: String::new(),
            operation,
            cause: Box::new(Cause(error)),
        }
    }
}

/// The cause of an [`Error::Unavailable`]: the client's error, whose chain goes on through a
/// gRPC status to what the status came from (a refused connection, say), which etcd-client's
/// own error leaves out.
#[derive(Debug)]
struct Cause(etcd_client::Error);

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            etcd_client::Error::GRpcStatus(status) => f.write_str(status.message()),
            other => std::fmt::Display::fmt(other, f),
        }
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            etcd_client::Error::GRpcStatus(status) => std::error::Error::source(status),
            other => std::error::Error::source(other),
        }
    }
}
