//! The slots of a batch renewal ([`LeaseStore::renew_many`](super::LeaseStore::renew_many)), for store authors.

use crate::token::LeaseToken;

/// One slot of a batch renewal ([`LeaseStore::renew_many`](super::LeaseStore::renew_many)): the group's key and the token
/// the slot is held under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldSlot<'a> {
    /// The group's resolved store key.
    pub key: &'a str,
    /// The token the slot is held under.
    pub token: LeaseToken,
}

impl<'a> HeldSlot<'a> {
    /// The slot of group `key` held under `token`.
    pub fn new(key: &'a str, token: LeaseToken) -> Self {
        HeldSlot { key, token }
    }
}

/// How many slots a store renews in one round trip at most, in
/// [`LeaseStore::renew_many`](super::LeaseStore::renew_many): a longer batch is sent in parts of this size (the Redis
/// store's script and the PostgreSQL store's statement; a server blocks on each part, so the
/// parts stay short).
pub const RENEW_BATCH_LEN: usize = 128;
