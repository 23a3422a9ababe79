//! The PostgreSQL store's part of its [`Listener`]: one dedicated `LISTEN` connection per
//! store that turns release notifications into wake-ups of local waiters and observers,
//! and grant notifications into wake-ups of observers. It also announces the groups it has
//! waiters or observers of (shared advisory locks per group, held by that connection), so
//! that releases nobody waits for, and grants nobody observes, send no `NOTIFY`.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use deadpool_postgres::tokio_postgres::{self, AsyncMessage, Client, Statement};
use futures_util::StreamExt;

use super::schema::Names;
use super::tls::Connector;
use crate::share::Shares;
use crate::store::GroupWatch;
use crate::store::listener::{Connect, Connection, Listener};
use crate::store::watch::{Interest, Watchers};

/// Wakes local waiters when any process releases a slot of their group: the store's
/// [`Listener`], and the announcements of the groups waited on here.
pub(crate) struct Notifications {
    listener: Listener<Listen>,
}

/// How the `LISTEN` connection is made, and what is announced on it.
pub(crate) struct Listen {
    config: tokio_postgres::Config,
    connector: Connector,
    channel: String,
    announce_sql: String,
    withdraw_sql: String,
    observe_sql: String,
    unobserve_sql: String,
    announcements: Arc<Announcements>,
}

/// The groups announced on the current connection: one [`Announcement`] per group and
/// interest while it has local watches, kept in a [`Shares`]; its first watch announces the
/// group and its last withdraws it, under the shares' lock, so requests reach the server in
/// the order the watches came and went.
struct Announcements {
    /// How long an announcement or withdrawal may take before it is given up on: half the
    /// command timeout.
    answer_within: Duration,
    /// The current listening connection (none while it is made again). A plain mutex,
    /// never held across an await (and taken inside the shares' lock, never around it):
    /// requests are queued on the connection under it and their answers awaited after,
    /// so a silent connection holds up nobody.
    listener: std::sync::Mutex<Option<Arc<Statements>>>,
    watched: Shares<(Interest, String), Announcement>,
}

/// One group's announcement for one interest, alive while the group has local watches of
/// it; its last watch's going withdraws it ([`withdraw`]).
struct Announcement {
    interest: Interest,
    key: String,
    announcements: Weak<Announcements>,
    /// Whether the server has confirmed the announcement.
    confirmed: AtomicBool,
    /// Whether an observer came while it was not yet confirmed: its read may have come
    /// before the lock, so it reads again once the server confirms.
    joined_unconfirmed: AtomicBool,
}

/// A listening connection's client (kept, or the connection closes) and its prepared
/// statements.
struct Statements {
    client: Client,
    announce: Statement,
    withdraw: Statement,
    observe: Statement,
    unobserve: Statement,
}

/// The payload's prefix of a grant's notification (a release's is the bare key; keys hold
/// no spaces).
const GRANTED: &str = "granted ";

/// A live `LISTEN` connection: its statements, and the task that drives it (delivering its
/// notifications), which ends when the connection does.
pub(crate) struct Listening {
    statements: Arc<Statements>,
    driver: tokio::task::JoinHandle<()>,
}

/// A request already queued on the connection; awaiting it waits for the server's answer.
type Queued = Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send>>;

impl Notifications {
    /// `command_timeout` bounds each announcement (by half) and is how often the connection
    /// is pinged: a listening connection that does not answer only slows waiters (they
    /// wake at the nearest expiry), never fails them.
    pub(crate) fn new(
        config: tokio_postgres::Config,
        connector: Connector,
        names: &Names,
        command_timeout: Duration,
    ) -> Self {
        let announcements = Arc::new(Announcements {
            answer_within: command_timeout / 2,
            listener: std::sync::Mutex::default(),
            watched: Shares::with_last_out(withdraw),
        });
        let listen = Listen {
            config,
            connector,
            channel: names.channel.clone(),
            announce_sql: names.announce_sql.clone(),
            withdraw_sql: names.withdraw_sql.clone(),
            observe_sql: names.observe_sql.clone(),
            unobserve_sql: names.unobserve_sql.clone(),
            announcements,
        };
        Notifications { listener: Listener::new(listen, command_timeout) }
    }

    /// A watch woken by every release of group `key`. `LISTEN`, and the announcement that
    /// the group has a waiter here, are confirmed by the server before this returns (or
    /// given up on after half the command timeout), so no later release is missed.
    ///
    /// If the connection is being made again, the watch still works: its waiter wakes at the
    /// nearest expiry until the new connection announces the group and wakes every waiter.
    pub(crate) async fn watch(&self, key: &str) -> Result<GroupWatch, tokio_postgres::Error> {
        self.watch_for(Interest::Releases, key).await
    }

    /// A watch woken by every grant and release of group `key`, and after every gap in
    /// the connection; announced as [`watch`](Self::watch)'s is.
    pub(crate) async fn watch_changes(
        &self,
        key: &str,
    ) -> Result<GroupWatch, tokio_postgres::Error> {
        self.watch_for(Interest::Changes, key).await
    }

    async fn watch_for(
        &self,
        interest: Interest,
        key: &str,
    ) -> Result<GroupWatch, tokio_postgres::Error> {
        self.listener.start().await?;
        let watch = match interest {
            Interest::Releases => self.listener.waiters().watch(key),
            Interest::Changes => self.listener.waiters().watch_changes(key),
        };
        let announcements = &self.listener.part().announcements;
        // The first watch of the group announces it; the share is taken before the
        // announcement's await, so a caller that gives up waiting (a timeout) counts the
        // watch out again by dropping it.
        let mut queued = None;
        let share = announcements.watched.get_or_start(
            &(interest, key.to_owned()),
            |announced| {
                if !announced.confirmed.load(Ordering::SeqCst) {
                    announced.joined_unconfirmed.store(true, Ordering::SeqCst);
                }
                true
            },
            || {
                queued = announcements
                    .listener()
                    .as_ref()
                    .map(|statements| queue(statements, Request::Announce(interest), key));
                Announcement {
                    interest,
                    key: key.to_owned(),
                    announcements: Arc::downgrade(announcements),
                    confirmed: AtomicBool::new(false),
                    joined_unconfirmed: AtomicBool::new(false),
                }
            },
        );
        if let Some(queued) = queued {
            let answered = {
                let (announcements, key) = (announcements.clone(), key.to_owned());
                let observers = self.listener.waiters().clone();
                move |late: bool| {
                    let joined = announcements.confirmed(interest, &key);
                    // An observer that read before the lock was held reads again: a grant
                    // in between sent no NOTIFY.
                    if interest == Interest::Changes && (late || joined) {
                        observers.wake_observers(&key);
                    }
                }
            };
            announcements.answer_then(queued, "announce", key, answered).await;
        }
        Ok(watch.holding(share))
    }
}

impl Connect for Listen {
    type Connection = Listening;
    type Error = tokio_postgres::Error;
    const NAME: &'static str = "PostgreSQL LISTEN connection";

    /// Connects, starts driving the connection (delivering notifications to `waiters`),
    /// sends `LISTEN`, prepares the announcement statements and announces every group
    /// waited on here.
    async fn connect(
        &self,
        _attempt: usize,
        waiters: Arc<Watchers>,
    ) -> Result<Listening, tokio_postgres::Error> {
        #[allow(clippy::clone_on_copy)] // `NoTls` is Copy; the rustls connector is not
        let (client, mut connection) = self.config.connect(self.connector.clone()).await?;
        let driver = tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(notice) = message {
                    match notice.payload().strip_prefix(GRANTED) {
                        Some(key) => waiters.wake_observers(key),
                        None => waiters.wake(notice.payload()),
                    }
                }
            }
        });
        let ready = async {
            // An announcement may wait for a release's transaction, which holds the
            // group's wait lock until it commits: a `lock_timeout` or `statement_timeout`
            // the role sets would fail it, and leave the group unannounced (its releases
            // then send no NOTIFY) for as long as it is watched. This session's statements
            // wait only for locks, so it sets neither.
            let setup =
                format!("SET lock_timeout = 0; SET statement_timeout = 0; LISTEN {}", self.channel);
            client.batch_execute(&setup).await?;
            let announce = client.prepare(&self.announce_sql).await?;
            let withdraw = client.prepare(&self.withdraw_sql).await?;
            let observe = client.prepare(&self.observe_sql).await?;
            let unobserve = client.prepare(&self.unobserve_sql).await?;
            Ok::<_, tokio_postgres::Error>((announce, withdraw, observe, unobserve))
        };
        let (announce, withdraw, observe, unobserve) = match ready.await {
            Ok(statements) => statements,
            Err(error) => {
                driver.abort();
                return Err(error);
            }
        };
        let statements = Arc::new(Statements { client, announce, withdraw, observe, unobserve });
        // The announcements went with the old connection's session: every watched group
        // is announced again, under the shares' lock, so none starts or goes meanwhile.
        let queued: Vec<(String, Queued)> = self.announcements.watched.with_all(|watched| {
            *self.announcements.listener() = Some(statements.clone());
            watched
                .map(|announced| {
                    // The wake-up of every watch follows the reconnect.
                    announced.confirmed.store(true, Ordering::SeqCst);
                    let request = Request::Announce(announced.interest);
                    (announced.key.clone(), queue(&statements, request, &announced.key))
                })
                .collect()
        });
        // Awaited together: they were queued in order, and a silent connection costs one
        // `answer_within`, not one per group.
        let answers = queued.into_iter().map(|(key, queued)| async move {
            self.announcements.answer(queued, "announce", &key).await
        });
        futures_util::future::join_all(answers).await;
        Ok(Listening { statements, driver })
    }

    fn lost(&self) {
        *self.announcements.listener() = None;
    }
}

impl Connection for Listening {
    async fn closed(&mut self) {
        let _ = (&mut self.driver).await;
    }

    async fn ping(&mut self) -> bool {
        self.statements.client.simple_query("").await.is_ok()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Which of the listener's statements to run.
#[derive(Clone, Copy)]
enum Request {
    Announce(Interest),
    Withdraw(Interest),
}

/// Queues `request` for `key` on the listener's connection and returns its answer to
/// await. The request is written to the connection's queue before this returns (the first
/// poll of a prepared statement's execution sends it), so requests queued one after
/// another under the hub's lock reach the server in that order.
fn queue(statements: &Arc<Statements>, request: Request, key: &str) -> Queued {
    let (statements, key) = (statements.clone(), key.to_owned());
    let mut queued: Queued = Box::pin(async move {
        let statement = match request {
            Request::Announce(Interest::Releases) => &statements.announce,
            Request::Withdraw(Interest::Releases) => &statements.withdraw,
            Request::Announce(Interest::Changes) => &statements.observe,
            Request::Withdraw(Interest::Changes) => &statements.unobserve,
        };
        statements.client.execute(statement, &[&key]).await
    });
    let mut context = Context::from_waker(futures_util::task::noop_waker_ref());
    match queued.as_mut().poll(&mut context) {
        Poll::Ready(done) => Box::pin(std::future::ready(done)),
        Poll::Pending => queued,
    }
}

impl Announcements {
    fn listener(&self) -> std::sync::MutexGuard<'_, Option<Arc<Statements>>> {
        self.listener.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for a queued announcement or withdrawal, at most `answer_within`. A failure is
    /// only logged: waiters still wake at the nearest expiry, and a new connection announces
    /// every watched group again.
    async fn answer(&self, queued: Queued, what: &'static str, key: &str) {
        self.answer_then(queued, what, key, |_| {}).await;
    }

    /// [`answer`](Self::answer), then `answered(late)` once the server has confirmed it: at
    /// once, or from a task if the answer comes after `answer_within` (`late`).
    async fn answer_then(
        &self,
        mut queued: Queued,
        what: &'static str,
        key: &str,
        answered: impl FnOnce(bool) + Send + 'static,
    ) {
        match tokio::time::timeout(self.answer_within, &mut queued).await {
            Ok(Ok(_)) => answered(false),
            Ok(Err(error)) => {
                tracing::debug!(%error, group = key, what, "PostgreSQL LISTEN connection")
            }
            Err(_) => {
                tracing::debug!(group = key, what, "PostgreSQL LISTEN connection: no answer yet");
                tokio::spawn(async move {
                    if queued.await.is_ok() {
                        answered(true);
                    }
                });
            }
        }
    }

    /// Records that the server confirmed `key`'s announcement; whether an observer joined
    /// before it did.
    fn confirmed(&self, interest: Interest, key: &str) -> bool {
        let mut joined = false;
        self.watched.with(&(interest, key.to_owned()), |announced| {
            announced.confirmed.store(true, Ordering::SeqCst);
            joined = announced.joined_unconfirmed.swap(false, Ordering::SeqCst);
        });
        joined
    }
}

/// The last local watch of a group has gone (under the shares' lock): its announcement is
/// withdrawn on the current connection, its answer awaited in a task, since a drop cannot
/// wait. Without a connection there is nothing to withdraw: the next one announces only
/// what is watched.
fn withdraw(announced: &Announcement) {
    let Some(announcements) = announced.announcements.upgrade() else {
        return; // the store is gone, and the connection with it
    };
    let request = Request::Withdraw(announced.interest);
    let queued = announcements
        .listener()
        .as_ref()
        .map(|statements| queue(statements, request, &announced.key));
    let (Some(queued), Ok(runtime)) = (queued, tokio::runtime::Handle::try_current()) else {
        return;
    };
    let key = announced.key.clone();
    runtime.spawn(async move { announcements.answer(queued, "withdraw", &key).await });
}
