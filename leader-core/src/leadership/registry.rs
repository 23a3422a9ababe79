//! [`LeadershipRegistry`]: several roles started together, looked up by name, stopped
//! together.

use std::sync::Arc;

use super::{Leadership, LeadershipOptions, LeadershipSettings};
use crate::error::Error;
use crate::key::check_name;
use crate::store::{IntoSharedStore, LeaseStore};

/// Roles to start together over one store, each with its own options.
///
/// Every role's options and key are checked before any role starts; a repeated role, or
/// two roles that resolve to one key, are refused.
///
/// ```
/// use leader_core::{LeadershipOptions, LeadershipRegistry, MemoryStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
/// let mut registry = LeadershipRegistry::new(MemoryStore::new());
/// registry.add_role("scheduler")?;
/// registry.add_role_with("outbox", LeadershipOptions::new().lease_time(Duration::from_secs(10)))?;
/// assert!(registry.add_role("scheduler").is_err());
///
/// let roles = registry.start().await?;
/// roles.get("scheduler").unwrap().wait_for_leadership().await?;
/// roles.stop().await?; // every role releases its slot
/// # Ok(()) }
/// ```
pub struct LeadershipRegistry {
    store: Arc<dyn LeaseStore>,
    defaults: LeadershipOptions,
    roles: Vec<(String, Option<LeadershipOptions>)>,
}

impl LeadershipRegistry {
    /// An empty registry over `store`, with default options for roles added without their own.
    pub fn new(store: impl IntoSharedStore) -> Self {
        LeadershipRegistry {
            store: store.into_shared_store(),
            defaults: LeadershipOptions::default(),
            roles: Vec::new(),
        }
    }

    /// The options of roles added with [`add_role`](Self::add_role). Default:
    /// `LeadershipOptions::default()`.
    pub fn defaults(mut self, options: LeadershipOptions) -> Self {
        self.defaults = options;
        self
    }

    /// Adds `role` with the registry's default options.
    pub fn add_role(&mut self, role: &str) -> Result<&mut Self, Error> {
        self.add(role, None)
    }

    /// Adds `role` with its own options.
    pub fn add_role_with(
        &mut self,
        role: &str,
        options: LeadershipOptions,
    ) -> Result<&mut Self, Error> {
        self.add(role, Some(options))
    }

    fn add(&mut self, role: &str, options: Option<LeadershipOptions>) -> Result<&mut Self, Error> {
        check_name(role)?;
        if self.roles.iter().any(|(added, _)| added == role) {
            return Err(Error::RoleAlreadyAdded { role: role.to_owned() });
        }
        self.roles.push((role.to_owned(), options));
        Ok(self)
    }

    /// Checks every role's options and resolved key as [`start`](Self::start) does,
    /// touching no store: the first invalid value (its message names the role), or two
    /// roles that share a key, fail.
    pub fn validate(&self) -> Result<(), Error> {
        self.settings().map(drop)
    }

    fn settings(&self) -> Result<Vec<LeadershipSettings>, Error> {
        let mut settings: Vec<LeadershipSettings> = Vec::with_capacity(self.roles.len());
        for (role, options) in &self.roles {
            let checked = options
                .as_ref()
                .unwrap_or(&self.defaults)
                .settings(role)
                .map_err(|error| naming_role(error, role))?;
            if let Some(same) = settings.iter().find(|earlier| earlier.key == checked.key) {
                return Err(Error::RolesShareKey {
                    first: same.role.clone(),
                    second: role.clone(),
                    key: checked.key,
                });
            }
            settings.push(checked);
        }
        Ok(settings)
    }

    /// Validates every role, starts them all on the current tokio runtime, and returns once
    /// the store answered every role's first candidacy attempt (a grant, a slot held by
    /// others, or an unreachable store, which the roles wait out), as
    /// [`Leadership::start`] does for one role. Fails on the first invalid role before any
    /// starts, and with the first refusal only a change of configuration helps (an option
    /// the store cannot keep, credentials, a permission; see
    /// [`LeadershipStatus::failure`](crate::LeadershipStatus::failure)), after stopping
    /// every role again.
    pub async fn start(self) -> Result<Roles, Error> {
        let settings = self.settings()?;
        let leaderships = settings
            .into_iter()
            .map(|settings| Leadership::start_validated(settings, self.store.clone()))
            .collect();
        let roles = Roles { leaderships };
        let answers = roles.leaderships.iter().map(Leadership::first_answer);
        let refused =
            futures_util::future::join_all(answers).await.into_iter().find_map(Result::err);
        match refused {
            Some(error) => {
                let _ = roles.stop().await;
                Err(error)
            }
            None => Ok(roles),
        }
    }

    /// What [`start`](Self::start) now does.
    ///
    /// ```
    /// use leader_core::{LeadershipOptions, LeadershipRegistry, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leader_core::Error> {
    /// let mut registry = LeadershipRegistry::new(MemoryStore::new());
    /// registry.add_role("scheduler")?.add_role("outbox")?;
    /// let roles = registry.start().await?;
    /// roles.stop().await?;
    /// # Ok(()) }
    /// ```
    #[deprecated(note = "`start().await` checks each role's first answer now")]
    pub async fn start_and_check(self) -> Result<Roles, Error> {
        self.start().await
    }
}

/// The started roles of a [`LeadershipRegistry`].
#[derive(Debug)]
pub struct Roles {
    leaderships: Vec<Leadership>,
}

impl Roles {
    /// The leadership of `role`, if the registry had it.
    pub fn get(&self, role: &str) -> Option<&Leadership> {
        self.leaderships.iter().find(|leadership| leadership.role() == role)
    }

    /// Every role's leadership, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = &Leadership> {
        self.leaderships.iter()
    }

    /// Stops every role at once, each releasing its slot, and waits for all of them; `Err`
    /// with the first role's failure (see [`Leadership::stop`]).
    pub async fn stop(self) -> Result<(), Error> {
        let stopping = self.leaderships.iter().map(Leadership::stop);
        futures_util::future::join_all(stopping)
            .await
            .into_iter()
            .find(Result::is_err)
            .unwrap_or(Ok(()))
    }
}

/// `error` with the role it belongs to named in its message, when it is an invalid option
/// (the option's own message names the option and value, not which of the roles has it).
fn naming_role(error: Error, role: &str) -> Error {
    match error {
        Error::InvalidOption { option, value, allowed } => {
            Error::InvalidOption { option, value, allowed: format!("{allowed} (role `{role}`)") }
        }
        other => other,
    }
}
