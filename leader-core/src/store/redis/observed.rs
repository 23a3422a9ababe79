//! Keeping a group announced as observed while this store has observers of it, so that its
//! grants (and releases) are published: the first observer's announcement is awaited, a task
//! renews it every [`RENEW_EVERY`] and again after each gap in the subscription (the server
//! may have lost it), and the last observer's leaving withdraws it.

use std::time::Duration;

use tokio::sync::OnceCell;

use super::RedisStore;
use crate::backoff::{Backoff, FIRST_PAUSE, SUBSCRIPTION_CEILING};
use crate::error::Error;
use crate::share::{Share, Shares};

/// How long one announcement lasts: the most a crashed observer's process keeps a group's
/// grants published.
pub(crate) const OBSERVE_FOR: Duration = Duration::from_secs(15 * 60);

/// How often an announcement is renewed while observers remain: one command per observed
/// group and store, whatever the number of observers.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(5 * 60);

/// The groups this store announces, each while a change watch of it lives.
#[derive(Default)]
pub(crate) struct Observed {
    by_key: Shares<String, Announcement>,
}

/// One group's announcement, kept by its observers' watches.
pub(crate) struct Announcement {
    store: RedisStore,
    key: String,
    /// Set once the first announcement was answered; every watch waits for it.
    announced: OnceCell<()>,
    renewal: tokio::task::AbortHandle,
}

/// The announcement of `key`, made if this store has none, once the server has it.
pub(crate) async fn announce(
    store: &RedisStore,
    key: &str,
) -> Result<Share<String, Announcement>, Error> {
    let announcement = store.inner.observed.by_key.get_or_start(
        &key.to_owned(),
        |_| true,
        || Announcement {
            store: store.clone(),
            key: key.to_owned(),
            announced: OnceCell::new(),
            renewal: tokio::spawn(renew(store.clone(), key.to_owned())).abort_handle(),
        },
    );
    announcement.announced.get_or_try_init(|| store.observe_announcement(key, OBSERVE_FOR)).await?;
    Ok(announcement)
}

/// Renews `key`'s announcement every [`RENEW_EVERY`], and at once after a gap in the
/// subscription, then wakes the group's observers, which read the state again: a grant
/// made while the server had lost the announcement is seen then.
async fn renew(store: RedisStore, key: String) {
    let mut restorations = store.inner.releases.watchers().restorations();
    loop {
        let restored = tokio::select! {
            biased;
            () = tokio::time::sleep(RENEW_EVERY) => false,
            () = restorations.woken() => true,
        };
        let mut backoff = Backoff::new(FIRST_PAUSE, SUBSCRIPTION_CEILING).jittered();
        let mut failed = false;
        while let Err(error) = store.observe_announcement(&key, OBSERVE_FOR).await {
            tracing::debug!(group = %key, %error, "redis: renewing an observed group's announcement");
            failed = true;
            tokio::time::sleep(backoff.next_pause()).await;
        }
        // The announcement may have lapsed, or gone with the server's data: a grant made
        // meanwhile published nothing, so the observers read the group again.
        if restored || failed {
            store.inner.releases.watchers().wake_observers(&key);
        }
    }
}

/// The last observer's leaving (the group is no longer among the announced ones by then).
impl Drop for Announcement {
    fn drop(&mut self) {
        self.renewal.abort();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (store, key) = (self.store.clone(), std::mem::take(&mut self.key));
        runtime.spawn(async move {
            if let Err(error) = store.observe_announcement(&key, Duration::ZERO).await {
                tracing::debug!(group = %key, %error, "redis: withdrawing an observed group");
            }
            // An observer that came while the withdrawal was on its way is announced again,
            // and reads the group again (a grant in between published nothing).
            if store.inner.observed.by_key.contains(key.as_str())
                && store.observe_announcement(&key, OBSERVE_FOR).await.is_ok()
            {
                store.inner.releases.watchers().wake_observers(&key);
            }
        });
    }
}
