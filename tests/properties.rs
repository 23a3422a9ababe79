//! Property tests: key resolution and options validation against independent statements of
//! their rules, and `MemoryStore` against a simple model of a group, over random sequences
//! and over random batches of operations racing on several threads (each batch must match
//! the model in some order: a linearizability check).

use std::time::Duration;

use leader::store::{AcquireOutcome, AcquireRequest, ReleaseOutcome, RenewOutcome};
use leader::{
    Error, KeyOptions, LeaderGroupElectionOptions, LeaderGroupElector, LeaseStore, LeaseToken,
    MemoryStore,
};
use proptest::prelude::*;

fn valid_name_char(c: char) -> bool {
    !c.is_whitespace() && !c.is_control()
}

proptest! {
    #[test]
    fn keys_resolve_as_namespace_plus_format(
        namespace in "[a-z:]{0,8}",
        before in "[a-z:]{0,6}",
        after in "[a-z:]{0,6}",
        name in "[a-zA-Z0-9_.-]{1,20}",
    ) {
        let format = format!("{before}{{role}}{after}{{role}}");
        let keys = KeyOptions::new().namespace(&namespace).format(&format);
        let key = keys.resolve(&name).unwrap();
        prop_assert_eq!(key, format!("{namespace}{before}{name}{after}{name}"));
    }

    #[test]
    fn any_name_is_accepted_exactly_when_the_rules_say_so(name in any::<String>(), max_len in 1usize..64) {
        let keys = KeyOptions::new().max_len(max_len);
        let expected_key = format!("leader:{name}");
        let valid_name = !name.is_empty() && name.chars().all(valid_name_char);
        match keys.resolve(&name) {
            Ok(key) => {
                prop_assert!(valid_name && expected_key.len() <= max_len);
                prop_assert_eq!(key, expected_key);
            }
            Err(Error::InvalidName { .. }) => prop_assert!(!valid_name),
            Err(Error::InvalidKey { .. }) => prop_assert!(valid_name && expected_key.len() > max_len),
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }

    #[test]
    fn options_are_valid_exactly_when_the_rules_say_so(
        max_leaders in 0u32..5,
        wait_ms in prop_oneof![0u64..10_000, Just(u64::MAX / 2)],
        lease_ms in prop_oneof![0u64..10_000, Just(1u64 << 48)],
        min_lease_ms in 0u64..12_000,
        auto_extend in any::<bool>(),
        interval_ms in proptest::option::of(0u64..6_000),
    ) {
        let mut options = LeaderGroupElectionOptions::new(max_leaders)
            .wait_time(Duration::from_millis(wait_ms))
            .lease_time(Duration::from_millis(lease_ms))
            .min_lease_time(Duration::from_millis(min_lease_ms))
            .auto_extend(auto_extend);
        if let Some(interval) = interval_ms {
            options = options.renew_interval(Duration::from_millis(interval));
        }
        let max_ms = 1u64 << 47;
        let cadence_ok = match (auto_extend, interval_ms) {
            (false, None) => true,
            (false, Some(_)) => false, // nothing would renew: refused, not ignored
            (true, None) => lease_ms >= 3,
            (true, Some(every)) => every >= 1 && u128::from(every) * 2 <= u128::from(lease_ms),
        };
        let expected = max_leaders >= 1
            && wait_ms <= max_ms
            && (1..=max_ms).contains(&lease_ms)
            && min_lease_ms <= lease_ms
            && cadence_ok;
        let result = LeaderGroupElector::new(MemoryStore::new(), options);
        prop_assert_eq!(result.is_ok(), expected, "{:?}", result.err());
    }
}

/// One operation on a group, by a candidate numbered 0..5.
#[derive(Debug, Clone)]
enum Op {
    Acquire { who: usize, lease_ms: u64, max_leaders: u32 },
    Renew { who: usize, lease_ms: u64 },
    Release { who: usize, min_lease_ms: u64 },
    Advance { ms: u64 },
    State,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..5, 1u64..50, 1u32..=3).prop_map(|(who, lease_ms, max_leaders)| Op::Acquire { who, lease_ms, max_leaders }),
        2 => (0usize..5, 1u64..50).prop_map(|(who, lease_ms)| Op::Renew { who, lease_ms }),
        2 => (0usize..5, 0u64..30).prop_map(|(who, min_lease_ms)| Op::Release { who, min_lease_ms }),
        3 => (1u64..30).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::State),
    ]
}

/// The model: what a group's rules say, in a few lines, with time in whole milliseconds.
#[derive(Default, Clone, PartialEq, Eq)]
struct Model {
    now: u64,
    max_leaders: u32,
    last_fence: u64,
    /// (who, fence, acquired, expires)
    slots: Vec<(usize, u64, u64, u64)>,
}

/// What an operation returned, store or model, in comparable form.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Granted { fence: u64, acquired_ms: u64, expires_in_ms: u64 },
    Full { nearest_ms: u64 },
    Mismatch { requested: u32, existing: u32 },
    Renewed { expires_in_ms: u64 },
    Released,
    Kept { expires_in_ms: u64 },
    NotHeld,
    State { slots: Vec<(String, u64, u64)> },
    Nothing,
}

impl Model {
    /// A store's state after [`epoch_of`]'s probe grant, which took fence 1 (a
    /// `MemoryStore`'s fences come from one counter for all its groups).
    fn after_probe() -> Self {
        Model { last_fence: 1, ..Model::default() }
    }
}

impl Model {
    fn purge(&mut self) {
        let now = self.now;
        self.slots.retain(|slot| slot.3 > now);
    }

    fn apply(&mut self, op: &Op) -> Seen {
        self.purge();
        match *op {
            Op::Acquire { who, lease_ms, max_leaders } => {
                if let Some(&(_, fence, acquired, expires)) = self.slots.iter().find(|s| s.0 == who)
                {
                    return Seen::Granted {
                        fence,
                        acquired_ms: acquired,
                        expires_in_ms: expires - self.now,
                    };
                }
                if !self.slots.is_empty() && self.max_leaders != max_leaders {
                    return Seen::Mismatch { requested: max_leaders, existing: self.max_leaders };
                }
                if self.slots.is_empty() {
                    self.max_leaders = max_leaders;
                }
                if self.slots.len() >= max_leaders as usize {
                    let nearest = self.slots.iter().map(|s| s.3).min().unwrap();
                    return Seen::Full { nearest_ms: nearest - self.now };
                }
                self.last_fence += 1;
                self.slots.push((who, self.last_fence, self.now, self.now + lease_ms));
                Seen::Granted {
                    fence: self.last_fence,
                    acquired_ms: self.now,
                    expires_in_ms: lease_ms,
                }
            }
            Op::Renew { who, lease_ms } => match self.slots.iter_mut().find(|s| s.0 == who) {
                Some(slot) => {
                    slot.3 = self.now + lease_ms;
                    Seen::Renewed { expires_in_ms: lease_ms }
                }
                None => Seen::NotHeld,
            },
            Op::Release { who, min_lease_ms } => match self.slots.iter().position(|s| s.0 == who) {
                None => Seen::NotHeld,
                Some(index) => {
                    let keep_until = self.slots[index].2 + min_lease_ms;
                    if keep_until > self.now {
                        let slot = &mut self.slots[index];
                        slot.3 = slot.3.min(keep_until);
                        Seen::Kept { expires_in_ms: slot.3 - self.now }
                    } else {
                        self.slots.remove(index);
                        Seen::Released
                    }
                }
            },
            Op::Advance { ms } => {
                self.now += ms;
                Seen::Nothing
            }
            Op::State => {
                let mut slots: Vec<_> =
                    self.slots.iter().map(|s| (format!("c{}", s.0), s.1, s.3 - self.now)).collect();
                slots.sort_by_key(|s| s.1);
                Seen::State { slots }
            }
        }
    }
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

async fn run_on_store(store: &MemoryStore, tokens: &[LeaseToken], op: &Op) -> Seen {
    const KEY: &str = "leader:modelled";
    match *op {
        Op::Acquire { who, lease_ms, max_leaders } => {
            let holder = format!("c{who}");
            let request = AcquireRequest::new(
                KEY,
                std::num::NonZeroU32::new(max_leaders).expect("at least one slot"),
                tokens[who],
                &holder,
                Duration::from_millis(lease_ms),
            );
            match store.acquire(request).await {
                Ok(AcquireOutcome::Granted(grant)) => {
                    let acquired_ms =
                        ms(grant.acquired_at.duration_since(epoch_of(store).await).unwrap());
                    Seen::Granted {
                        fence: grant.fence,
                        acquired_ms,
                        expires_in_ms: ms(grant.expires_in),
                    }
                }
                Ok(AcquireOutcome::Full { nearest_expiry }) => {
                    Seen::Full { nearest_ms: ms(nearest_expiry) }
                }
                Err(Error::MaxLeadersMismatch { requested, existing, .. }) => {
                    Seen::Mismatch { requested, existing }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        Op::Renew { who, lease_ms } => {
            match store.renew(KEY, tokens[who], Duration::from_millis(lease_ms)).await.unwrap() {
                RenewOutcome::Renewed { expires_in, .. } => {
                    Seen::Renewed { expires_in_ms: ms(expires_in) }
                }
                RenewOutcome::NotHeld => Seen::NotHeld,
                other => panic!("unexpected {other:?}"),
            }
        }
        Op::Release { who, min_lease_ms } => {
            match store
                .release(KEY, tokens[who], Duration::from_millis(min_lease_ms))
                .await
                .unwrap()
            {
                ReleaseOutcome::Released => Seen::Released,
                ReleaseOutcome::Kept { expires_in } => Seen::Kept { expires_in_ms: ms(expires_in) },
                ReleaseOutcome::NotHeld => Seen::NotHeld,
                other => panic!("unexpected {other:?}"),
            }
        }
        Op::Advance { ms } => {
            tokio::time::advance(Duration::from_millis(ms)).await;
            Seen::Nothing
        }
        Op::State => {
            let snapshot = store.state(KEY).await.unwrap();
            Seen::State {
                slots: snapshot
                    .leaders
                    .iter()
                    .map(|s| (s.holder.clone(), s.fence, ms(s.expires_in)))
                    .collect(),
            }
        }
    }
}

/// The store's clock at its creation: the grant time of a probe group made at time zero.
async fn epoch_of(store: &MemoryStore) -> std::time::SystemTime {
    let request = AcquireRequest::new(
        "leader:epoch-probe",
        std::num::NonZeroU32::MIN,
        "00000000000000000000000000000007".parse().unwrap(),
        "probe",
        leader::MAX_DURATION, // never expires while the test runs
    );
    match store.acquire(request).await.unwrap() {
        AcquireOutcome::Granted(grant) => grant.acquired_at,
        other => panic!("{other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn memory_store_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let store = MemoryStore::new();
            epoch_of(&store).await; // the probe group is made at time zero
            let tokens: Vec<LeaseToken> = (0..5).map(|_| LeaseToken::generate().unwrap()).collect();
            let mut model = Model::after_probe();
            for (step, op) in ops.iter().enumerate() {
                let expected = model.apply(op);
                let seen = run_on_store(&store, &tokens, op).await;
                assert_eq!(seen, expected, "step {step}: {op:?}\nops: {ops:?}");
            }
        });
    }
}

/// What an operation returned, without the times, which run on the real clock here.
fn coarse(seen: Seen) -> Seen {
    match seen {
        Seen::Granted { fence, .. } => Seen::Granted { fence, acquired_ms: 0, expires_in_ms: 0 },
        Seen::Full { .. } => Seen::Full { nearest_ms: 0 },
        Seen::Renewed { .. } => Seen::Renewed { expires_in_ms: 0 },
        Seen::Kept { .. } => Seen::Kept { expires_in_ms: 0 },
        Seen::State { slots } => Seen::State {
            slots: slots.into_iter().map(|(who, fence, _)| (who, fence, 0)).collect(),
        },
        other => other,
    }
}

/// Operations that race: long leases (nothing expires during the test), no clock steps.
fn racing_op() -> impl Strategy<Value = Op> {
    const LONG: u64 = 600_000;
    prop_oneof![
        4 => (0usize..5, 1u32..=3).prop_map(|(who, max_leaders)| Op::Acquire { who, lease_ms: LONG, max_leaders }),
        2 => (0usize..5).prop_map(|who| Op::Renew { who, lease_ms: LONG }),
        2 => (0usize..5).prop_map(|who| Op::Release { who, min_lease_ms: 0 }),
        1 => Just(Op::State),
    ]
}

/// Every order of `ops`' indices.
fn orders(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut all = Vec::new();
    for order in orders(n - 1) {
        for at in 0..=order.len() {
            let mut longer = order.clone();
            longer.insert(at, n - 1);
            all.push(longer);
        }
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn memory_store_is_linearizable_under_racing_threads(
        batches in proptest::collection::vec(proptest::collection::vec(racing_op(), 1..5), 1..12)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_time().build().unwrap();
        runtime.block_on(async {
            let store = std::sync::Arc::new(MemoryStore::new());
            epoch_of(&store).await; // before any grant, as `run_on_store` expects
            let tokens: Vec<LeaseToken> = (0..5).map(|_| LeaseToken::generate().unwrap()).collect();
            // Every model state the results so far allow.
            let mut models = vec![Model::after_probe()];
            for (number, batch) in batches.iter().enumerate() {
                let start = std::sync::Arc::new(tokio::sync::Barrier::new(batch.len()));
                let racing: Vec<_> = batch
                    .iter()
                    .cloned()
                    .map(|op| {
                        let (store, tokens, start) = (store.clone(), tokens.clone(), start.clone());
                        tokio::spawn(async move {
                            start.wait().await;
                            coarse(run_on_store(&store, &tokens, &op).await)
                        })
                    })
                    .collect();
                let mut seen = Vec::new();
                for task in racing {
                    seen.push(task.await.unwrap());
                }
                let mut next = Vec::new();
                for model in &models {
                    for order in orders(batch.len()) {
                        let mut candidate = model.clone();
                        let mut expected: Vec<Option<Seen>> = batch.iter().map(|_| None).collect();
                        for &index in &order {
                            expected[index] = Some(coarse(candidate.apply(&batch[index])));
                        }
                        let expected: Vec<Seen> = expected.into_iter().map(Option::unwrap).collect();
                        if expected == seen && !next.contains(&candidate) {
                            next.push(candidate);
                        }
                    }
                }
                assert!(!next.is_empty(), "batch {number}: {batch:?} gave {seen:?}, which no order of the model gives\nbatches: {batches:?}");
                models = next;
            }
        });
    }
}
