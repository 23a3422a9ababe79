//! The floor of an uncontended cycle on the server: what one acquire and one release cost
//! Redis, beside the same commands with no logic around them and the usual Redis mutex
//! cycle (`SET NX PX`, then a compare-and-delete script, as distributed-lock-redis sends).
//! Each is replayed by `redis-benchmark` with 50 clients pipelining 16 requests, so the
//! server is the bottleneck and its time per request is one over the rate; A B A B.

use leader::store::author::ScriptCall;

use crate::checks::load_script;
use crate::server::Server;

/// Server µs per cycle: ours (both scripts in one call), the bare commands, the mutex.
pub struct Floor {
    pub ours: f64,
    pub bare: f64,
    pub mutex: f64,
}

/// The commands a cycle runs inside the server (a grant, then its release), with no logic:
/// the least any script of this layout can cost.
const BARE_CYCLE: &str = "\
redis.call('GET', KEYS[2])
redis.call('TIME')
redis.call('HGETALL', KEYS[1])
redis.call('HSET', KEYS[1], ARGV[1], '1700000010000:1700000000000001:1700000000000:bench', \
'max', '1', 'fence', '1700000000000001')
redis.call('PEXPIRE', KEYS[1], '3610000')
redis.call('TIME')
redis.call('HMGET', KEYS[1], ARGV[1], 'waiting', 'watched')
redis.call('HDEL', KEYS[1], ARGV[1])
return 1";

const UNLOCK: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
return redis.call('DEL', KEYS[1]) else return 0 end";

/// Both of the store's scripts in one: each whole script (its prelude too, as every call
/// runs it) as a function, called with the arguments the store sends, under a fresh token.
fn cycle_script() -> (String, Vec<String>) {
    let acquire = ScriptCall::acquire("bench:floor", "TOKEN", "bench", 10_000, 1).unwrap();
    let release = ScriptCall::release("bench:floor", "TOKEN", 0).unwrap();
    let keys: usize = acquire.args[0].parse().unwrap();
    let group_keys = acquire.args[..=keys].to_vec(); // numkeys, then the keys
    let lua_args = |call: &ScriptCall| -> String {
        let keys: usize = call.args[0].parse().unwrap();
        call.args[1 + keys..]
            .iter()
            .map(|arg| if arg == "TOKEN" { "token".to_owned() } else { format!("{arg:?}") })
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Each script starts with its shebang line (its flags), which may only open a script:
    // the combined one opens with the writing scripts' flags, and the bodies go without it.
    let body = |source: &'static str| match source.split_once('\n') {
        Some((first, rest)) if first.starts_with("#!") => rest,
        _ => source,
    };
    let script = format!(
        "#!lua flags=allow-oom\n\
         local function acquire(KEYS, ARGV)\n{}\nend\n\
         local function release(KEYS, ARGV)\n{}\nend\n\
         local token = ARGV[1]\n\
         acquire(KEYS, {{{}}})\n\
         release(KEYS, {{{}}})\n\
         return 1",
        body(acquire.source),
        body(release.source),
        lua_args(&acquire),
        lua_args(&release)
    );
    (script, group_keys)
}

pub async fn floor(server: &Server, requests: u64) -> Floor {
    let mut connection = server.connection().await;
    let (cycle, group_keys) = cycle_script();
    let with_keys = |sha: &str| -> Vec<String> {
        let mut args = vec!["EVALSHA".to_owned(), sha.to_owned()];
        args.extend(group_keys.iter().cloned());
        args.push("__rand_int__".to_owned());
        args
    };
    let ours = load_script(&mut connection, &cycle).await;
    let bare = load_script(&mut connection, BARE_CYCLE).await;
    let unlock = load_script(&mut connection, UNLOCK).await;
    let per_request = |args: &[&str]| 1e6 / server.redis_benchmark(args, 50, 16, requests);
    let (ours_args, bare_args) = (with_keys(&ours), with_keys(&bare));
    let (ours_args, bare_args): (Vec<&str>, Vec<&str>) = (
        ours_args.iter().map(String::as_str).collect(),
        bare_args.iter().map(String::as_str).collect(),
    );
    let (mut sum_ours, mut sum_bare, mut sum_mutex) = (0.0, 0.0, 0.0);
    for _ in 0..2 {
        sum_ours += per_request(&ours_args);
        sum_bare += per_request(&bare_args);
        // Each SET takes a free lock; each unlock looks at another random one and finds no
        // match, so it skips the DEL: if anything, cheaper than the mutex's real cycle.
        sum_mutex +=
            per_request(&["SET", "bench:mutex:__rand_int__", "__rand_int__", "NX", "PX", "10000"])
                + per_request(&["EVALSHA", &unlock, "1", "bench:mutex:__rand_int__", "x"]);
    }
    server.cli(&["FLUSHALL"]);
    Floor { ours: sum_ours / 2.0, bare: sum_bare / 2.0, mutex: sum_mutex / 2.0 }
}
