//! `leader-bench`: measures `leader` against the physical limit and against peers in one
//! run, on a `redis-server` it starts itself, and prints a table (or `--json`).
//!
//! ```text
//! cargo run -p leader-bench --release                 # about four minutes (--json: as JSON)
//! cargo run -p leader-bench --release -- --quick      # shorter runs, for a smoke test
//! cargo run -p leader-bench --release -- --name-cache # only the electors' name cache
//! cargo run -p leader-bench --release -- --postgres-only  # only PostgresStore vs advisory locks
//! cargo run -p leader-bench --release -- --etcd-only  # only EtcdStore vs LockClient and elections
//! cargo run -p leader-bench --release -- --profile leader   # W1 and W2 of one library only
//! cargo run -p leader-bench --release -- --workloads   # only W1 and W2 of every library
//! cargo run -p leader-bench --release -- --floor       # only the server's floor per cycle
//! cargo run -p leader-bench --release -- --observe     # only observation across processes
//! cargo run -p leader-bench --release -- --partitions  # only partition leases at scale
//! cargo run -p leader-bench --release -- --partitions-core 200000  # only one core's load
//! cargo run -p leader-bench --release -- --partitions-renewal  # only the batched renewal
//! cargo run -p leader-bench --release -- --partitions-cpu  # one node's CPU at 5k-20k partitions
//! cargo run -p leader-bench --release -- --partitions-etcd  # partition leases on etcd
//! cargo run -p leader-bench --release -- --partitions-takeover  # takeover time by count, every store
//! cargo run -p leader-bench --release -- --partitions-moves  # moves per join, leave, rolling restart
//! cargo run -p leader-bench --release -- --partitions-rebalance  # only the rebalancing after a join
//! cargo run -p leader-bench --release -- --fairness  # 20 waiters' wins and losses in a row (or --priorities)
//! ```
//!
//! The machine is shared and noisy: every comparison is run A B A B (two rounds of every
//! contender) and reported as ratios within the run.

mod checks;
mod contenders;
mod etcd;
mod fairness;
mod floor;
mod heap;
mod observe;
mod partitions;
mod partitions_cpu;
mod partitions_etcd;
mod partitions_moves;
mod partitions_takeover;
mod postgres;
mod priorities;
mod server;
mod stats;
mod workloads;

use std::sync::OnceLock;
use std::time::Duration;

use contenders::Contender;

#[global_allocator]
static ALLOCATOR: heap::CountingAllocator = heap::CountingAllocator;

use serde_json::json;
use server::Server;
use stats::{ms, percentile};

/// One contender's run of W1 or W2: its rate, and the CPU time the server and this process
/// (every client's tasks, the runtime) spent per operation.
struct Row {
    contender: String,
    n: u32,
    rate: f64,
    server_cpu_us: f64,
    client_cpu_us: f64,
}

/// Which figure of a [`Row`] a table line shows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Figure {
    Rate,
    ServerCpu,
    ClientCpu,
}

/// The bench server's URL, for the peers that need it again.
pub static SERVER_URL: OnceLock<String> = OnceLock::new();

const CONTENDERS: [&str; 3] = ["leader", "rslock", "distributed-lock-redis"];

/// The contenders of W1 and W2: the libraries, and leader's guard form (`acquire`, then
/// `release`) beside its closure form, in the same rounds.
const W1_CONTENDERS: [&str; 4] = ["leader", "leader-guard", "rslock", "distributed-lock-redis"];

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, url, key, lease_ms] = args.as_slice()
        && flag == "--hold"
    {
        checks::hold_until_killed(url, key, lease_ms.parse().expect("lease in ms")).await;
        return;
    }
    if let [flag, url, key, count] = args.as_slice()
        && flag == "--observer"
    {
        observe::observer_process(url, key, count.parse().expect("a count")).await;
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--postgres-only") {
        postgres::run(quick, &|line| println!("{line}")).await;
        return;
    }
    if args.iter().any(|a| a == "--etcd-only") {
        etcd::run(quick, &|line| println!("{line}")).await;
        return;
    }
    if args.iter().any(|a| a == "--name-cache") {
        let (hit, miss) = checks::name_cache(100_000, 6).await;
        println!("name cache on MemoryStore: {hit:.0} ns/call hit, {miss:.0} ns/call miss");
        return;
    }
    // `--profile NAME`: only W1 and W2 of one contender, for a profiler to watch.
    let profile = args.iter().position(|a| a == "--profile").and_then(|i| args.get(i + 1)).cloned();
    let as_json = args.iter().any(|a| a == "--json");
    // `--workloads`: only the W1 and W2 rows (throughput and server CPU), for A/B work.
    let workloads_only = args.iter().any(|a| a == "--workloads");
    let period = Duration::from_secs(if quick { 1 } else { 3 });
    let samples = if quick { 30 } else { 100 };

    // The measurements that start servers of their own.
    let say: &dyn Fn(String) = &|line| println!("{line}");
    for arg in &args {
        match arg.as_str() {
            "--partitions-takeover" => return partitions_takeover::run(say).await,
            "--fairness" => return fairness::run(say).await,
            "--priorities" => return priorities::run(say).await,
            "--partitions-moves" => return partitions_moves::run(say).await,
            "--partitions-etcd" => return partitions_etcd::run(say).await,
            _ => {}
        }
    }
    let server = Server::start();
    SERVER_URL.set(server.url()).unwrap();
    if args.iter().any(|a| a == "--observe") {
        observation(&server, quick, &|line| println!("{line}")).await;
        return;
    }
    if let Some(leases) =
        args.iter().position(|a| a == "--partitions-core").and_then(|i| args.get(i + 1))
    {
        partitions::core_only(&server, leases.parse().expect("a count"), &|line| {
            println!("{line}")
        })
        .await;
        return;
    }
    for arg in &args {
        match arg.as_str() {
            "--partitions-cpu" => return partitions_cpu::run(&server, say).await,
            "--partitions-renewal" => return partitions::renewal_only(&server, say).await,
            "--partitions-rebalance" => return partitions::rebalance_only(&server, say).await,
            "--partitions" => return partitions::run(&server, quick, say).await,
            _ => {}
        }
    }
    if args.iter().any(|a| a == "--floor") {
        for _ in 0..2 {
            let floor = floor::floor(&server, 200_000).await;
            println!(
                "µs per cycle: leader {:.1}, its commands alone {:.1}, mutex {:.1}",
                floor.ours, floor.bare, floor.mutex
            );
        }
        return;
    }
    let mut report = serde_json::Map::new();
    let say = |line: String| {
        if !as_json {
            println!("{line}");
        }
    };
    say(format!(
        "leader-bench: redis-server {} at {}, {} tasks, {:?} per run, A B A B\n",
        server
            .cli(&["INFO", "server"])
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?"),
        server.url(),
        workloads::TASKS,
        period
    ));

    // W1, W2: two rounds of every contender, in turn.
    server.reset_stats();
    // Each row: contender, N, operations per second, and the server's CPU µs per operation
    // (its CPU time around the workload, divided by the operations).
    let mut w1: Vec<Row> = Vec::new();
    let mut w2: Vec<Row> = Vec::new();
    let row = |name: &str, n: u32, rate: f64, server_cpu: (f64, f64), client_cpu: (f64, f64)| {
        let ops = (rate * period.as_secs_f64()).max(1.0);
        Row {
            contender: name.to_owned(),
            n,
            rate,
            server_cpu_us: (server_cpu.1 - server_cpu.0) * 1e6 / ops,
            client_cpu_us: (client_cpu.1 - client_cpu.0) * 1e6 / ops,
        }
    };
    for round in 0..2 {
        for name in W1_CONTENDERS.into_iter().filter(|n| profile.as_deref().is_none_or(|p| p == *n))
        {
            let contender = Contender::connect(name, &server.url()).await;
            for n in [1, 3] {
                if !contender.supports(n) {
                    continue;
                }
                let run = format!("{name}-{n}-{round}");
                let (server_before, client_before) =
                    (server.cpu_seconds(), stats::own_cpu_seconds());
                let rate = workloads::uncontended(&contender, n, &run, period).await;
                let (server_cpu, client_cpu) = (
                    (server_before, server.cpu_seconds()),
                    (client_before, stats::own_cpu_seconds()),
                );
                w1.push(row(name, n, rate, server_cpu, client_cpu));
                let (server_before, client_before) =
                    (server.cpu_seconds(), stats::own_cpu_seconds());
                let rate = workloads::contended(&contender, n, &run, period).await.0;
                let (server_cpu, client_cpu) = (
                    (server_before, server.cpu_seconds()),
                    (client_before, stats::own_cpu_seconds()),
                );
                w2.push(row(name, n, rate, server_cpu, client_cpu));
            }
        }
        server.cli(&["FLUSHALL"]);
    }
    if let Some(name) = &profile {
        for (workload, rows) in [("W1", &w1), ("W2", &w2)] {
            for row in rows {
                println!(
                    "{name}: {workload} N={} {:.0}/s, client CPU {:.2} µs/op, Redis CPU {:.2} µs/op",
                    row.n, row.rate, row.client_cpu_us, row.server_cpu_us
                );
            }
        }
        // Where the server's time went: µs per call of each command clients sent, and of
        // the ones scripts ran (Redis counts both in commandstats).
        for line in server.cli(&["INFO", "commandstats"]).lines() {
            if let Some(stats) = line.strip_prefix("cmdstat_") {
                println!("  {stats}");
            }
        }
        return;
    }
    let mean_of = |rows: &[Row], name: &str, n: u32, figure: Figure| {
        let values: Vec<f64> = rows
            .iter()
            .filter(|row| row.contender == name && row.n == n)
            .map(|row| match figure {
                Figure::Rate => row.rate,
                Figure::ServerCpu => row.server_cpu_us,
                Figure::ClientCpu => row.client_cpu_us,
            })
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let mean = |rows: &[Row], name: &str, n: u32| mean_of(rows, name, n, Figure::Rate);

    say("| workload | leader | rslock 0.10 | distributed-lock-redis 0.2 |".to_owned());
    say("|---|---|---|---|".to_owned());
    let rows = [
        ("W1 uncontended cycles/s", &w1, Figure::Rate),
        ("W2 contended attempts/s", &w2, Figure::Rate),
        ("Redis CPU µs per W1 cycle", &w1, Figure::ServerCpu),
        ("Redis CPU µs per W2 attempt", &w2, Figure::ServerCpu),
        ("client CPU µs per W1 cycle", &w1, Figure::ClientCpu),
        ("client CPU µs per W2 attempt", &w2, Figure::ClientCpu),
    ];
    for (label, rows, figure) in rows {
        let cell = |name: &str, n: u32| match mean_of(rows, name, n, figure) {
            None => "-".to_owned(),
            Some(v) if figure == Figure::Rate => format!("{v:.0}"),
            Some(v) => format!("{v:.1}"),
        };
        for n in [1, 3] {
            say(format!(
                "| {label}, N={n} | {} | {} | {} |",
                cell("leader", n),
                cell("rslock", n),
                cell("distributed-lock-redis", n)
            ));
        }
    }
    for n in [1, 3] {
        if let (Some(guard), Some(closure)) = (mean(&w1, "leader-guard", n), mean(&w1, "leader", n))
        {
            say(format!(
                "leader's guard form (acquire, release), W1 N={n}: {guard:.0} cycles/s, {:.1}% of \
                 the closure form's {closure:.0} in the same rounds",
                guard / closure * 100.0
            ));
        }
    }
    say(String::new());
    if workloads_only {
        return;
    }
    // W3: hand-over latency, A B A B.
    let mut w3: Vec<(String, Vec<Duration>)> =
        CONTENDERS.iter().map(|n| (n.to_string(), Vec::new())).collect();
    for round in 0..2 {
        for (name, latencies) in w3.iter_mut() {
            let holder = Contender::connect(name, &server.url()).await;
            let waiter = Contender::connect(name, &server.url()).await;
            latencies.extend(
                workloads::hand_over(&holder, &waiter, &format!("{name}-{round}"), samples / 2)
                    .await,
            );
        }
    }

    let mut hand_over = Vec::new();
    for (name, latencies) in w3.iter_mut() {
        let (p50, p99) = (percentile(latencies, 50.0), percentile(latencies, 99.0));
        hand_over.push(format!("{} / {}", ms(p50), ms(p99)));
        report.insert(
            format!("w3_{name}_ms"),
            json!({"p50": p50.as_secs_f64() * 1e3, "p99": p99.as_secs_f64() * 1e3}),
        );
    }
    say(format!(
        "| W3 hand-over p50 / p99 ms | {} | {} | {} |\n",
        hand_over[0], hand_over[1], hand_over[2]
    ));
    for (label, rows) in [("w1", &w1), ("w2", &w2)] {
        for name in W1_CONTENDERS {
            for n in [1, 3] {
                if let Some(v) = mean(rows, name, n) {
                    report.insert(format!("{label}_{name}_n{n}"), json!(v));
                }
                if let Some(v) = mean_of(rows, name, n, Figure::ServerCpu) {
                    report.insert(format!("{label}_{name}_n{n}_server_cpu_us"), json!(v));
                }
                if let Some(v) = mean_of(rows, name, n, Figure::ClientCpu) {
                    report.insert(format!("{label}_{name}_n{n}_client_cpu_us"), json!(v));
                }
            }
        }
    }

    // The ceiling for one cycle, from redis-benchmark calling our scripts.
    let ceiling = checks::ceiling(&server, if quick { 20_000 } else { 300_000 }).await;
    let w1_leader = mean(&w1, "leader", 1).unwrap_or(0.0);
    say(format!(
        "ceiling (redis-benchmark -c 50, EVALSHA of our scripts): acquire {:.0}/s pipelined (-P 16), {:.0}/s unpipelined; release {:.0}/s pipelined",
        ceiling.acquire_pipelined, ceiling.acquire_plain, ceiling.release_pipelined
    ));
    say(format!(
        "  cycle ceiling {:.0}/s pipelined; leader W1 (N=1) reaches {:.2} of it\n",
        ceiling.cycles(),
        w1_leader / ceiling.cycles()
    ));
    report.insert("ceiling".into(), json!({
        "acquire_pipelined": ceiling.acquire_pipelined, "acquire_unpipelined": ceiling.acquire_plain,
        "release_pipelined": ceiling.release_pipelined, "cycle_pipelined": ceiling.cycles(),
        "w1_leader_share": w1_leader / ceiling.cycles(),
    }));

    // The floor of a cycle on the server, against the usual mutex.
    let floor = floor::floor(&server, if quick { 10_000 } else { 200_000 }).await;
    say(format!(
        "server time per uncontended cycle (redis-benchmark -c 50 -P 16): leader's scripts {:.1} µs, their commands alone {:.1} µs, SET NX PX + compare-and-delete {:.1} µs; ratios {:.2} and {:.2}\n",
        floor.ours,
        floor.bare,
        floor.mutex,
        floor.ours / floor.mutex,
        floor.bare / floor.mutex
    ));
    report.insert(
        "floor_us_per_cycle".into(),
        json!({"leader": floor.ours, "bare_commands": floor.bare, "mutex": floor.mutex}),
    );

    // Round trips per operation, from INFO commandstats.
    let store = leader::RedisStore::connect(&server.url()).await.unwrap();
    let trips = checks::round_trips(&server, &store).await;
    say(format!(
        "round trips per operation (INFO commandstats): {}",
        trips.iter().map(|(op, n)| format!("{op} {n:.2}")).collect::<Vec<_>>().join(", ")
    ));
    report.insert(
        "round_trips".into(),
        json!(
            trips
                .iter()
                .map(|(op, n)| (op.to_string(), json!(n)))
                .collect::<serde_json::Map<_, _>>()
        ),
    );

    // Uncontended latency against PING.
    let latency = checks::latency(&server, &store, if quick { 200 } else { 2_000 }).await;
    let ((a50, a99), (r50, r99), (p50, p99)) = (latency.acquire, latency.raw_script, latency.ping);
    say(format!(
        "uncontended acquire latency p50 {} ms, p99 {} ms; PING p50 {} ms, p99 {} ms; p50 ratio {:.2}\n  \
         the same script as a bare EVALSHA: p50 {} ms, p99 {} ms, p50 ratio to PING {:.2}",
        ms(a50),
        ms(a99),
        ms(p50),
        ms(p99),
        a50.as_secs_f64() / p50.as_secs_f64(),
        ms(r50),
        ms(r99),
        r50.as_secs_f64() / p50.as_secs_f64()
    ));
    report.insert(
        "latency_ms".into(),
        json!({
            "acquire_p50": a50.as_secs_f64() * 1e3, "acquire_p99": a99.as_secs_f64() * 1e3,
            "raw_script_p50": r50.as_secs_f64() * 1e3, "raw_script_p99": r99.as_secs_f64() * 1e3,
            "ping_p50": p50.as_secs_f64() * 1e3, "ping_p99": p99.as_secs_f64() * 1e3,
        }),
    );

    // Crash fail-over.
    let mut overshoots = checks::crash_fail_over(&server, if quick { 2 } else { 10 }).await;
    let worst = *overshoots.iter().max().unwrap();
    say(format!(
        "crash fail-over (holder SIGKILLed, 1 s lease): waiter held the slot p50 {} ms, worst {} ms after the dead holder's expiry",
        ms(percentile(&mut overshoots, 50.0)),
        ms(worst)
    ));
    report.insert("crash_fail_over_worst_ms".into(), json!(worst.as_secs_f64() * 1e3));

    // Idle cost.
    let idle_window = Duration::from_secs(if quick { 1 } else { 3 });
    let idle = checks::idle_cost(&server, 1_000, idle_window).await;
    say(format!("idle: 1,000 waiters on a full group sent {idle} commands in {idle_window:?}"));
    report.insert("idle_commands".into(), json!(idle));

    // The electors' name cache (issue 17, item 7).
    let (hit, miss) = checks::name_cache(if quick { 5_000 } else { 100_000 }, 4).await;
    say(format!(
        "name cache on MemoryStore: {hit:.0} ns per call naming the same group (hit), {miss:.0} ns alternating two groups (miss)"
    ));
    report.insert("name_cache_ns".into(), json!({"hit": hit, "miss": miss}));

    // Observation across processes, on Redis and PostgreSQL.
    report.insert("observation".into(), observation(&server, quick, &say).await);

    // PostgreSQL.
    let postgres = postgres::run(quick, &say).await;
    report.insert("postgres".into(), postgres);

    // etcd.
    report.insert("etcd".into(), etcd::run(quick, &say).await);

    // Scale.
    let (candidates, groups) = if quick { (500, 50) } else { (10_000, 1_000) };
    let window = Duration::from_secs(if quick { 2 } else { 6 });
    let memory = checks::scale_memory(candidates, groups, window).await;
    let redis = checks::scale(
        leader::RedisStore::connect(&server.url()).await.unwrap(),
        candidates,
        groups,
        window,
    )
    .await;
    for (store, figures) in [("MemoryStore", &memory), ("RedisStore", &redis)] {
        say(format!(
            "scale on {store}: {candidates} candidates / {groups} groups: {:.0} holders, {:.0} heap bytes per candidate ({:.0} resident), {:.2} renewals per holder per lease, {:.2} attempts per standby per lease",
            figures["holders"],
            figures["heap_bytes_per_candidate"],
            figures["bytes_per_candidate"],
            figures["renewals_per_holder_per_lease"],
            figures["attempts_per_standby_per_lease"]
        ));
        report.insert(format!("scale_{store}"), json!(figures));
    }
    if as_json {
        println!("{}", serde_json::Value::Object(report));
    }
}

/// The observation section on the bench's Redis server and on a private PostgreSQL one.
async fn observation(server: &Server, quick: bool, say: &dyn Fn(String)) -> serde_json::Value {
    let samples = if quick { 10 } else { 200 };
    let candidate = leader::RedisStore::connect(&server.url()).await.unwrap();
    let idle = |window: Duration| {
        server.reset_stats();
        std::thread::sleep(window);
        let mut sent: Vec<(String, u64)> = server.client_commands_by_name().into_iter().collect();
        sent.sort();
        let total: u64 = sent.iter().map(|(_, n)| n).sum();
        let named: Vec<String> = sent.iter().map(|(name, n)| format!("{n} {name}")).collect();
        let subscribers = server.cli(&["CLIENT", "LIST", "TYPE", "pubsub"]).lines().count() as u64;
        (format!("{total} commands ({})", named.join(", ")), subscribers)
    };
    let redis = observe::run("Redis", &server.url(), &candidate, samples, Some(&idle), say).await;
    let postgres_server = leader_testkit::postgres_server::PostgresServer::start();
    let candidate = leader::PostgresStore::connect(&postgres_server.url()).await.unwrap();
    let postgres =
        observe::run("PostgreSQL", &postgres_server.url(), &candidate, samples, None, say).await;
    json!({"redis": redis, "postgres": postgres})
}
