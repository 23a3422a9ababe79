//! [`PartitionOptions`]: the lease, its renewal, the hand-over grace, the holder id and keys
//! of a node of a partition set.

use std::sync::Arc;
use std::time::Duration;

use crate::duration::within_limit;
use crate::error::Error;
use crate::holder;
use crate::key::KeyOptions;
use crate::leadership::WhenUncoordinated;
use crate::timing::LeaseTiming;

/// The most partitions a set may have.
pub const MAX_PARTITIONS: u32 = 1_000_000;

/// The largest [`weight`](PartitionOptions::weight) a node may announce.
pub const MAX_WEIGHT: u32 = 1_000;

/// How one node of a [`Partitions`](super::Partitions) set holds its partitions. Setters
/// never fail; [`validate`](Self::validate) and `Partitions::start` name the first value out
/// of range. With feature `serde` it loads from configuration (durations as `"10s"`), checked
/// as it loads.
///
/// The times are a [`LeaseTiming`](crate::LeaseTiming), as in every options type: each
/// partition's lease and the node's announcement live `lease_time` without renewal (a dead
/// node's partitions move after at most this plus a renewal interval of the others); every
/// `renew_interval` the node renews its announcement and every partition it owns, in
/// batches, and reads who the members are; a failed renewal or read is retried after
/// `retry_interval`, and a claim's attempts back off up to it while the store fails (a claim
/// of a partition another node still holds waits for its release or expiry instead).
///
/// ```
/// use std::time::Duration;
/// use leader_core::PartitionOptions;
///
/// let options = PartitionOptions::new()
///     .lease_time(Duration::from_secs(10)) // a dead node's partitions move after at most this
///     .handover_grace(Duration::from_secs(2))
///     .holder_id("consumer-a");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(remote = "Self", default, deny_unknown_fields)
)]
pub struct PartitionOptions {
    #[cfg_attr(feature = "serde", serde(flatten, skip_deserializing))]
    timing: LeaseTiming,
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "humantime_serde::serialize",
            deserialize_with = "crate::serde_support::field::handover_grace"
        )
    )]
    handover_grace: Option<Duration>,
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::serde_support::field::holder_id")
    )]
    holder_id: Option<String>,
    keys: KeyOptions,
    weight: u32,
    when_uncoordinated: WhenUncoordinated,
}

crate::serde_support::validated_serde!(PartitionOptions, PartitionOptions::validate, embeds timing);

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions {
            timing: LeaseTiming::default(),
            handover_grace: None,
            holder_id: None,
            keys: KeyOptions::default(),
            weight: 1,
            when_uncoordinated: WhenUncoordinated::Follow,
        }
    }
}

impl PartitionOptions {
    /// The defaults: a 30 s lease renewed every 10 s, keys `leader:{name}/members` and
    /// `leader:{name}/{partition}`.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a partition the node hands over (to a node that joined, or at
    /// [`stop`](super::Partitions::stop)) stays held, and renewed, after its
    /// [`cancelled`](super::Partition::cancelled) signal, for its work to finish: the node
    /// releases it once every [`Partition`](super::Partition) handle of it is dropped, or
    /// when the grace ends. Default: `renew_interval`. At most `lease_time`.
    pub fn handover_grace(mut self, grace: Duration) -> Self {
        self.handover_grace = Some(grace);
        self
    }

    /// This node's id in state and logs (every partition slot and the announcement carry
    /// it). Default: `hostname:pid:random`.
    pub fn holder_id(mut self, holder_id: impl Into<String>) -> Self {
        self.holder_id = Some(holder_id.into());
        self
    }

    /// How `{name}/members` and `{name}/{partition}` become store keys. Default:
    /// `leader:{role}`. An exact key is refused: a set has many keys.
    pub fn keys(mut self, keys: KeyOptions) -> Self {
        self.keys = keys;
        self
    }

    /// This node's capacity, relative to the other nodes': its share of the partitions is
    /// `count * weight / total weight` of the live nodes, rounded down or up (a node of
    /// weight 2 owns twice what a node of weight 1 does). Announced with the node, so the
    /// others compute the same table. Default: 1 (without weights, `count / n` each).
    /// Between 1 and [`MAX_WEIGHT`].
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// What a node does over a store that does not coordinate (a
    /// [`DisabledStore`](crate::DisabledStore)), as a [`Leadership`](crate::Leadership)
    /// does: [`WhenUncoordinated::Follow`] owns no partition, so nodes that share such a
    /// store by mistake do not all work on every partition; [`WhenUncoordinated::Lead`]
    /// owns every partition, under fence 0, until stopped (one process, local
    /// development). Default: `Follow`.
    pub fn when_uncoordinated(mut self, behaviour: WhenUncoordinated) -> Self {
        self.when_uncoordinated = behaviour;
        self
    }

    /// Checks every option (the key options too) as `Partitions::start` does, touching no
    /// store; the error names the first value out of range. The set's name and count, and
    /// the holder id's length with the count it announces, are checked when a node starts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leader_core::PartitionOptions;
    ///
    /// let options = PartitionOptions::new()
    ///     .lease_time(Duration::from_secs(10))
    ///     .handover_grace(Duration::from_secs(20)); // longer than the lease
    /// assert_eq!(
    ///     options.validate().unwrap_err().to_string(),
    ///     "invalid `handover_grace` 20s: must be at most lease_time (10s)"
    /// );
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        self.keys.validate()?;
        self.checked_weight()?;
        self.checked_times().map(drop)?;
        holder::chosen_or_default(self.holder_id.as_ref()).map(drop)
    }

    /// The weight, checked.
    fn checked_weight(&self) -> Result<u32, Error> {
        if !(1..=MAX_WEIGHT).contains(&self.weight) {
            return Err(Error::invalid_option(
                "weight",
                self.weight,
                format!("must be between 1 and {MAX_WEIGHT}"),
            ));
        }
        Ok(self.weight)
    }

    /// The lease, renewal, retry and hand-over times, checked.
    fn checked_times(&self) -> Result<Timing, Error> {
        let times = self.timing.resolve(true)?;
        let (lease_time, renew_interval, retry_interval) =
            (times.lease_time, times.renew_interval, times.retry_interval);
        let handover_grace =
            within_limit("handover_grace", self.handover_grace.unwrap_or(renew_interval))?;
        if handover_grace > lease_time {
            return Err(Error::invalid_option(
                "handover_grace",
                handover_grace,
                format!("must be at most lease_time ({lease_time:?})"),
            ));
        }
        Ok(Timing { lease_time, renew_interval, retry_interval, handover_grace })
    }

    /// Checks the options and resolves the keys of set `name` of `count` partitions.
    pub(crate) fn settings(&self, name: &str, count: u32) -> Result<Settings, Error> {
        // The name alone first: the keys' roles (`{name}/0`) are never empty.
        crate::key::check_name(name)?;
        if count == 0 || count > MAX_PARTITIONS {
            return Err(Error::invalid_option(
                "count",
                count,
                format!("must be between 1 and {MAX_PARTITIONS}"),
            ));
        }
        let member_key = self.keys.resolve(&format!("{name}/members"))?;
        let first = self.keys.resolve(&format!("{name}/0"))?;
        if first == member_key {
            return Err(Error::invalid_option(
                "keys",
                &self.keys,
                "must give each partition a key of its own: use a format with `{role}`, not an \
                 exact key",
            ));
        }
        // The longest partition key is the last one's: checked here, not at the first use.
        let partition_keys = (0..count)
            .map(|partition| self.keys.resolve(&format!("{name}/{partition}")))
            .collect::<Result<Vec<_>, _>>()?;
        let Timing { lease_time, renew_interval, retry_interval, handover_grace } =
            self.checked_times()?;
        let holder_id = holder::chosen_or_default(self.holder_id.as_ref())?;
        let member_holder = member_holder(&holder_id, count, self.checked_weight()?);
        if member_holder.len() > holder::MAX_HOLDER_LEN {
            return Err(Error::invalid_option(
                "holder_id",
                &holder_id,
                format!(
                    "must be at most {} bytes for a node of {count} partitions (its announcement \
                     adds `{}`)",
                    holder::MAX_HOLDER_LEN - (member_holder.len() - holder_id.len()),
                    &member_holder[holder_id.len()..]
                ),
            ));
        }
        Ok(Settings {
            name: name.into(),
            count,
            member_key,
            partition_keys,
            lease_time,
            renew_interval,
            retry_interval,
            handover_grace,
            holder_id: holder_id.into(),
            member_holder: member_holder.into(),
            when_uncoordinated: self.when_uncoordinated,
        })
    }
}

crate::timing::timing_setters!(PartitionOptions);

/// The checked times of [`PartitionOptions`].
struct Timing {
    lease_time: Duration,
    renew_interval: Duration,
    retry_interval: Duration,
    handover_grace: Duration,
}

/// Options after validation, with the set's resolved keys.
#[derive(Debug)]
pub(crate) struct Settings {
    pub name: Arc<str>,
    pub count: u32,
    /// The group every live node holds a slot of: its announcement.
    pub member_key: String,
    /// Each partition's group (of one slot), by partition.
    pub partition_keys: Vec<String>,
    pub lease_time: Duration,
    pub renew_interval: Duration,
    pub retry_interval: Duration,
    pub handover_grace: Duration,
    pub holder_id: Arc<str>,
    /// The holder of the node's announcement: its holder id and the set's count, so a node
    /// started with another count is told (see [`announced`]).
    pub member_holder: Arc<str>,
    pub when_uncoordinated: WhenUncoordinated,
}

/// The holder of an announcement of node `holder_id` in a set of `count` partitions, of
/// `weight` (named only when it is not 1, so unweighted nodes announce what they always
/// did).
fn member_holder(holder_id: &str, count: u32, weight: u32) -> String {
    match weight {
        1 => format!("{holder_id} [{count} partitions]"),
        weight => format!("{holder_id} [{count} partitions, weight {weight}]"),
    }
}

/// The holder id, count and weight an announcement's holder names; `None` for a holder of
/// another form.
pub(crate) fn announced(member_holder: &str) -> Option<(&str, u32, u32)> {
    let (holder_id, inside) = member_holder.strip_suffix(']')?.rsplit_once(" [")?;
    let (count, weight) = match inside.split_once(" partitions, weight ") {
        Some((count, weight)) => (count, weight.parse().ok()?),
        None => (inside.strip_suffix(" partitions")?, 1),
    };
    Some((holder_id, count.parse().ok()?, weight))
}
